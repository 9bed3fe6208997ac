#!/bin/sh
# Installs what ssmc needs to build, test and run on Debian 12 (run as root).
# libutf8proc-dev and libonig-dev are the tokenizer's Unicode and regular
# expressions. clang, libFuzzer (libclang-rt-14-dev) and llvm-symbolizer
# (llvm) are for tools/fuzz.sh. libmicrohttpd is `ssmc serve`'s HTTP server;
# curl and the openai npm package (tests/serve, pinned, npm ci) drive it in the
# tests. The WebGPU host (runtime/web) needs Node 20+
# with npm and its npm packages (webgpu: Dawn; playwright-core: drives
# Chromium), and Debian's chromium, whose chromium-common holds SwiftShader
# (the Vulkan driver Dawn runs on without a GPU). Node and npm are installed
# only where they are missing: an image that has Node from elsewhere (with
# its own npm) conflicts with Debian's npm package.
set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential cmake pkg-config ca-certificates git \
  libvulkan-dev libvulkan1 libshaderc-dev glslc libyaml-dev libcjson-dev libcunit1-dev libxxhash-dev \
  libutf8proc-dev libonig-dev \
  mesa-vulkan-drivers vulkan-validationlayers python3 \
  clang libclang-rt-14-dev llvm libmicrohttpd-dev curl chromium chromium-common >/dev/null
command -v node >/dev/null || apt-get install -y -qq --no-install-recommends nodejs >/dev/null
command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends npm >/dev/null
node -e 'process.exit(parseInt(process.versions.node) < 20 ? 1 : 0)' ||
  echo "install-deps: Node $(node --version) is older than 20; the WebGPU tests need Node 20+" >&2
(cd "$(dirname "$0")/../tests/serve" && npm ci --no-audit --no-fund --loglevel=error)
# the pinned packages of runtime/web/package-lock.json (webgpu's postinstall
# script is not needed on Linux)
cd "$(dirname "$0")/../runtime/web" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
