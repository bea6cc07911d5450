#!/bin/sh
# Fails unless libposenc exports only pe_* functions and has SONAME libposenc.so.0.
set -eu
lib="$1"
nm=${NM:-nm}
bad=$($nm -D --defined-only "$lib" | awk '$3 != "" {print $3}' | grep -v '^pe_' | grep -v '^LIBPOSENC_0$' || true)
if [ -n "$bad" ]; then
  echo "exported symbols that are not pe_*:"; echo "$bad"; exit 1
fi
n=$($nm -D --defined-only "$lib" | awk '$3 ~ /^pe_/' | wc -l)
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
if [ "$soname" != "libposenc.so.0" ]; then
  echo "SONAME is '$soname', expected libposenc.so.0"; exit 1
fi
echo "ok: $n pe_* symbols exported, nothing else; SONAME $soname"
