#!/usr/bin/env bash
# scripts/isa-paths.sh LIB - the kernel paths the library LIB (a built
# libposenc.so) can run on this CPU, asked of the library itself
# (pe_force_isa). Prints one line per path the library knows:
#   RUN avx2
#   SKIP avx512: this CPU cannot run the avx512 path: it has no AVX-512F/BW/DQ/VL ...
# so a CI log says which paths were exercised and which were not, and why.
# With -q, prints only the names of the paths to run, one per line.
set -euo pipefail
quiet=0
[ "${1:-}" = -q ] && { quiet=1; shift; }
lib=${1:?usage: scripts/isa-paths.sh [-q] path/to/libposenc.so}
python3 - "$lib" "$quiet" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.pe_last_error.restype = ctypes.c_char_p
quiet = sys.argv[2] == "1"
for name in ("scalar", "avx2", "avx512", "avx512bf16", "neon"):
    st = lib.pe_force_isa(name.encode())
    if st == 0:
        print(name if quiet else f"RUN {name}")
    elif not quiet:
        why = lib.pe_last_error().decode().removeprefix("pe_force_isa: ")
        print(f"SKIP {name}: {why}")
PY
