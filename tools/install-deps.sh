#!/bin/sh
# Installs what ssmc needs to build, test and run on Debian 12 (run as root).
# libutf8proc-dev and libonig-dev are the tokenizer's Unicode and regular
# expressions. clang, libFuzzer (libclang-rt-14-dev) and llvm-symbolizer
# (llvm) are for tools/fuzz.sh. libmicrohttpd is `ssmc serve`'s HTTP server;
# curl, node and npm drive it in the tests (tests/serve/, whose pinned npm
# packages npm ci installs).
set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential cmake pkg-config ca-certificates git \
  libvulkan-dev libvulkan1 libshaderc-dev glslc libyaml-dev libcjson-dev libcunit1-dev libxxhash-dev \
  libutf8proc-dev libonig-dev \
  mesa-vulkan-drivers vulkan-validationlayers python3 \
  clang libclang-rt-14-dev llvm libmicrohttpd-dev curl nodejs >/dev/null
# npm comes with nodejs from some sources and separately from Debian
command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends npm >/dev/null
(cd "$(dirname "$0")/../tests/serve" && npm ci --no-audit --no-fund --loglevel=error)
