#!/bin/sh
# Configure, build and test the aarch64 cross build: every test binary runs
# under qemu-aarch64 through CMAKE_CROSSCOMPILING_EMULATOR, so this is the
# plain ctest of a native build. Needs gcc-aarch64-linux-gnu, qemu-user and
# the :arm64 -dev packages (scripts/install-deps.sh).
#   scripts/test-aarch64.sh [build-dir]      (default build-arm)
# Extra ctest arguments can be passed in CTEST_ARGS, e.g. CTEST_ARGS="-R isa".
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-arm}
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S "$root" -B "$build" \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DPE_BUILD_BENCH=OFF -DPE_WERROR=ON
cmake --build "$build" -j "$jobs"
# qemu makes the differential tests slow: allow them time.
# shellcheck disable=SC2086
ctest --test-dir "$build" --output-on-failure --timeout 3000 ${CTEST_ARGS:-}
