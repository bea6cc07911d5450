#!/bin/sh
# Compare the built libposenc.so with the committed ABI baseline
# (abi/libposenc.abi). Added functions are compatible; removed or changed
# ones, or changed types, fail. Prints one summary line.
# Usage: scripts/abi-check.sh [path/to/libposenc.so]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh build reliability
lib=${1:-}
if [ -z "$lib" ]; then
  bdir=build-rel-abi
  cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF \
    -DPE_BUILD_BENCH=OFF >/dev/null
  cmake --build "$bdir" --target posenc -j"$(nproc)" >/dev/null
  lib="$bdir/libposenc.so"
fi
[ -f abi/libposenc.abi ] || { echo "abi-check: no baseline abi/libposenc.abi (run scripts/abi-update.sh)"; exit 1; }
out=$(mktemp)
set +e
abidiff --headers-dir2 include --drop-private-types --no-added-syms abi/libposenc.abi "$lib" > "$out" 2>&1
rc=$?
set -e
added=$(abidiff --headers-dir2 include --drop-private-types abi/libposenc.abi "$lib" 2>/dev/null |
  sed -n 's/.*Functions changes summary: [0-9]* Removed, [0-9]* Changed[^,]*, \([0-9]*\) Added.*/\1/p' | head -1)
# abidiff's status is a bit mask: 1 error, 2 usage error, 4 ABI change,
# 8 incompatible ABI change. Only 4 alone (e.g. additions) passes.
if [ $((rc & 11)) -ne 0 ]; then
  cat "$out"
  echo "abi: INCOMPATIBLE change against abi/libposenc.abi (abidiff status $rc)"
  rm -f "$out"
  exit 1
fi
if [ $((rc & 4)) -ne 0 ]; then
  cat "$out"
  echo "abi: compatible changes only (abidiff status $rc), ${added:-0} functions added since the baseline"
else
  echo "abi: identical to abi/libposenc.abi, ${added:-0} functions added since the baseline"
fi
rm -f "$out"
