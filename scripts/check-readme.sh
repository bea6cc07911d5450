#!/bin/sh
# check-readme.sh - every C code block of README.md is a file of the source
# tree, quoted whole, so that what a reader copies is what CI compiles and
# runs (scripts/check-install.sh builds and runs every examples/*.c against
# an install). A C block is preceded by a line
#   <!-- file: examples/NAME.c -->
# (invisible on GitHub) and must equal that file byte for byte.
# Usage: scripts/check-readme.sh [README]   (default: README.md of the tree)
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
readme=${1:-$src/README.md}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/posenc-readme.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# Split the C blocks into $tmp/block.N, each with its file in $tmp/file.N.
awk -v dir="$tmp" '
  /^```/ && inb { inb = 0; close(out); next }
  /^```c$/ { n++; inb = 1; out = dir "/block." n; printf "" > out
             print (prev ~ /^<!-- file: [^ ]+ -->$/ ? prev : "") > (dir "/file." n); next }
  inb { print > out; next }
  NF { prev = $0 }
' "$readme"
n=0 bad=0
for b in "$tmp"/block.*; do
  [ -e "$b" ] || continue
  n=$((n + 1))
  i=${b##*.}
  f=$(sed -n 's/^<!-- file: \([^ ]*\) -->$/\1/p' "$tmp/file.$i")
  if [ -z "$f" ]; then
    echo "check-readme: C block $i of $readme has no '<!-- file: examples/NAME.c -->' line before it:" >&2
    head -n 3 "$b" | sed 's/^/    /' >&2
    bad=1
  elif [ ! -f "$src/$f" ]; then
    echo "check-readme: C block $i quotes $f, which does not exist" >&2
    bad=1
  elif ! diff -u "$src/$f" "$b" > "$tmp/diff"; then
    echo "check-readme: C block $i differs from $f (- file, + README):" >&2
    cat "$tmp/diff" >&2
    bad=1
  else
    echo "check-readme: C block $i = $f"
  fi
done
[ "$n" -gt 0 ] || { echo "check-readme: no C block in $readme" >&2; exit 1; }
[ "$bad" = 0 ] || exit 1
echo "check-readme: OK ($n C blocks, each a file CI compiles and runs)"
