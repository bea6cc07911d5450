#!/bin/sh
# check_exports.sh LIB [HEADER] [MAP]
# Fails unless the functions libposenc exports are exactly the PE_API
# declarations of include/posenc.h (set equality: a declared function that is
# not exported fails, and so does an exported one that is not declared), no
# internal pe__ name is exported, src/posenc.map lists exactly the same
# names, and the SONAME is libposenc.so.0. Every difference is printed, one
# name per line, marked with where it is missing.
set -eu
lib="$1"
here=$(cd "$(dirname "$0")" && pwd)
header="${2:-$here/../include/posenc.h}"
map="${3:-$here/../src/posenc.map}"
nm=${NM:-nm}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# PE_API declarations: comments removed, each declaration joined onto one
# line up to its '(' , the name is the identifier just before it.
awk '{ # strip /* */ comments, also across lines
    out = ""; s = $0
    while (length(s)) {
      if (inc) { i = index(s, "*/"); if (!i) break; s = substr(s, i + 2); inc = 0 }
      else { i = index(s, "/*"); if (!i) { out = out s; break }
             out = out substr(s, 1, i - 1); s = substr(s, i + 2); inc = 1 }
    }
    print out
  }' "$header" |
  awk '
    /^[ \t]*#/ { next }                       # the PE_API definitions themselves
    decl != "" { decl = decl " " $0 }
    decl == "" && /^[ \t]*PE_API[ \t]/ { decl = $0 }
    decl != "" && index(decl, "(") {
      s = substr(decl, 1, index(decl, "(") - 1)
      n = split(s, w, /[ \t*]+/)
      name = w[n]
      if (name !~ /^pe_[a-z0-9_]+$/) { print "UNPARSED: " decl; bad = 1 }
      else print name
      decl = ""
    }
    END { exit bad }' | sort -u > "$tmp/header" || {
  echo "check_exports: cannot parse a PE_API declaration of $header:"
  grep UNPARSED "$tmp/header"
  exit 1
}

# Dynamic symbols defined by the library (versions stripped; the version
# node LIBPOSENC_0 itself is not a symbol of the API).
$nm -D --defined-only "$lib" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' |
  grep -vx 'LIBPOSENC_0' | sort -u > "$tmp/lib"

# Names the version script lists as global.
awk '/global:/ { on = 1; next } /local:/ { on = 0 } on' "$map" |
  sed 's:/\*.*\*/::g; s/[ \t;]//g' | grep -v '^$' | sort -u > "$tmp/map"

status=0
report() { # title, file
  if [ -s "$2" ]; then
    echo "$1:"
    sed 's/^/  /' "$2"
    status=1
  fi
}
grep '^pe__' "$tmp/lib" > "$tmp/internal" || true
report "internal pe__ names exported (give them hidden visibility, never PE_API)" "$tmp/internal"
comm -23 "$tmp/header" "$tmp/lib" > "$tmp/missing"
report "declared PE_API in $(basename "$header") but not exported by $(basename "$lib")" "$tmp/missing"
comm -13 "$tmp/header" "$tmp/lib" > "$tmp/extra"
report "exported by $(basename "$lib") but not declared PE_API in $(basename "$header")" "$tmp/extra"
comm -23 "$tmp/header" "$tmp/map" > "$tmp/nomap"
report "declared PE_API but not listed in $(basename "$map") (add it under global:)" "$tmp/nomap"
comm -13 "$tmp/header" "$tmp/map" > "$tmp/mapextra"
report "listed in $(basename "$map") but not declared PE_API" "$tmp/mapextra"

soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
if [ "$soname" != "libposenc.so.0" ]; then
  echo "SONAME is '$soname', expected libposenc.so.0"
  status=1
fi
if [ $status -ne 0 ]; then
  echo "check_exports: FAILED"
  exit 1
fi
echo "ok: $(wc -l < "$tmp/lib") functions exported, exactly the $(wc -l < "$tmp/header") PE_API declarations of $(basename "$header") and the $(basename "$map") list; SONAME $soname"
