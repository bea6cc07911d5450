#!/bin/sh
# Regenerate abi/libposenc.abi, the ABI baseline scripts/abi-check.sh compares
# against. Run it only for a deliberate change of the public ABI, and say in
# the commit what changed and why (an incompatible change also needs a new
# SONAME). Usage: scripts/abi-update.sh [path/to/libposenc.so]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh build reliability
lib=${1:-}
if [ -z "$lib" ]; then
  # Debug info is what abidw reads; the optimisation level does not matter.
  bdir=build-rel-abi
  cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_TESTING=OFF \
    -DPE_BUILD_BENCH=OFF >/dev/null
  cmake --build "$bdir" --target posenc -j"$(nproc)" >/dev/null
  lib="$bdir/libposenc.so"
fi
mkdir -p abi
# No paths of this machine in the baseline: no corpus path, no compilation
# directory, no source locations; hashed type ids so an added type does not
# renumber the others (smaller diffs in review); no DT_NEEDED list, which
# depends on what the build machine had (hwloc is optional).
abidw --no-corpus-path --no-comp-dir-path --no-elf-needed --no-show-locs --type-id-style hash \
  --headers-dir include --drop-private-types --out-file abi/libposenc.abi.tmp "$lib"
sed -e "s#$root/##g" abi/libposenc.abi.tmp > abi/libposenc.abi
rm -f abi/libposenc.abi.tmp
n=$(grep -c '<elf-symbol name=.pe_' abi/libposenc.abi || true)
echo "abi-update: abi/libposenc.abi written ($n pe_* symbols)"
