#!/bin/sh
# Installs what ssmc needs on Debian 12 (run as root):
#   tools/install-deps.sh          to build and run it
#   tools/install-deps.sh --test   also what the test suite needs
# To build and run: a C compiler and CMake, Vulkan's loader and headers and
# Mesa's drivers (lavapipe where there is no GPU), libshaderc (GLSL to SPIR-V),
# libyaml, cJSON, xxHash, and the tokenizer's Unicode and regular expressions
# (libutf8proc, Oniguruma), libmicrohttpd, `ssmc serve`'s HTTP server, and
# libedit, the line editor of `ssmc run -i` on a terminal.
# For the tests: CUnit, the validation layers, python3 and python3-pip (with
# setuptools and wheel: python/'s test installs the package), curl and the openai
# npm package (tests/serve, pinned, npm ci) that drive the server, clang with
# libFuzzer (libclang-rt-14-dev) and llvm-symbolizer (llvm) for tools/fuzz.sh,
# and for the WebGPU host (runtime/web) Node 20+ with npm and its npm packages
# (webgpu: Dawn; playwright-core: drives Chromium) and Debian's chromium, whose
# chromium-common holds SwiftShader (the Vulkan driver Dawn runs on without a
# GPU). Node and npm are installed only where they are missing: an image that
# has Node from elsewhere (with its own npm) conflicts with Debian's npm package.
set -e
case "${1:-}" in
  "") test= ;;
  --test) test=1 ;;
  *) echo "usage: tools/install-deps.sh [--test]" >&2; exit 2 ;;
esac
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential cmake pkg-config ca-certificates git \
  libvulkan-dev libvulkan1 libshaderc-dev glslc libyaml-dev libcjson-dev libxxhash-dev \
  libutf8proc-dev libonig-dev libmicrohttpd-dev libedit-dev mesa-vulkan-drivers >/dev/null
[ -n "$test" ] || exit 0
apt-get install -y -qq --no-install-recommends \
  libcunit1-dev vulkan-validationlayers python3 python3-pip \
  clang libclang-rt-14-dev llvm curl chromium chromium-common >/dev/null
command -v node >/dev/null || apt-get install -y -qq --no-install-recommends nodejs >/dev/null
command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends npm >/dev/null
node -e 'process.exit(parseInt(process.versions.node) < 20 ? 1 : 0)' ||
  echo "install-deps: Node $(node --version) is older than 20; the WebGPU tests need Node 20+" >&2
(cd "$(dirname "$0")/../tests/serve" && npm ci --no-audit --no-fund --loglevel=error)
# the pinned packages of runtime/web/package-lock.json (webgpu's postinstall
# script is not needed on Linux)
cd "$(dirname "$0")/../runtime/web" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
