#!/bin/sh
# check-layers.sh - the library's folders include each other in one
# direction only (docs/design.md, "Layers"): a file of a folder may include
# its own folder's headers and those of the folders listed below for it, never
# a folder above. Exits 1 naming each include that breaks the order.
set -eu
cd "$(dirname "$0")/../src"
allowed() { # folder -> the folders it may include besides itself
  case "$1" in
    base) echo "" ;;
    kernels) echo "base" ;;
    check) echo "base kernels" ;;
    rope) echo "base kernels check" ;;
    kv) echo "base kernels check rope" ;;
    encodings) echo "base kernels check" ;;
    config) echo "base kernels check rope" ;;
    *) echo "?" ;;
  esac
}
bad=0
for f in */*.c */*.h; do
  dir=${f%%/*}
  ok=$(allowed "$dir")
  if [ "$ok" = "?" ]; then echo "check-layers: $f: folder $dir has no place in the layer order"; bad=1; continue; fi
  for inc in $(sed -n 's/^#include "\([a-z_0-9]*\)\/.*/\1/p' "$f" | sort -u); do
    [ "$inc" = "$dir" ] && continue
    case " $ok " in *" $inc "*) ;; *) echo "check-layers: $f includes $inc/ (a $dir file may include: ${ok:-nothing else})"; bad=1 ;; esac
  done
done
for f in *.c *.h; do
  [ -e "$f" ] && { echo "check-layers: src/$f is outside every folder"; bad=1; }
done
[ $bad = 0 ] && echo "check-layers: every include follows base < kernels < check < rope < kv; encodings; config"
exit $bad
