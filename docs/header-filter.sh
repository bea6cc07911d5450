#!/bin/sh
# header-filter.sh - Doxygen INPUT_FILTER for include/posenc.h.
#
# The header documents every declaration with plain C comments (/* ... */),
# which Doxygen ignores. This filter, applied only to the header, turns them
# into Doxygen comments on the fly, without touching the file:
#   - a comment opening a line (a block before a declaration) -> /** ... */
#   - a comment after code on the same line (field, enumerator,
#     parameter)                                               -> /**< ... */
#   - the file comment at the top gets \file so globals are documented.
# Section banners (/* ---- */ lines and the title between them) stay plain
# comments. Lines keep their numbers, so warnings point into the header.
# If the header moves to /** comments itself, this filter changes nothing.
exec awk '
function banner(s) { return s ~ /^\/\* -+ \*\/$/ }
NR == 1 && /^\/\*$/ { print "/** \\file posenc.h"; prev = $0; next }
banner($0) { print; prev = $0; next }
/^\/\* / && banner(prev) { print; prev = $0; next }
/^[ \t]*\/\* / { sub(/\/\* /, "/** "); print; prev = $0; next }
/[^ \t][ \t]*\/\* / { sub(/\/\* /, "/**< "); print; prev = $0; next }
{ print; prev = $0 }
' "$1"
