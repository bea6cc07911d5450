#!/bin/sh
# make-docs.sh - build the HTML API reference with Doxygen.
# Usage: scripts/make-docs.sh [--strict] [OUTPUT_DIR]   (default: build/docs)
# Opens as OUTPUT_DIR/html/index.html. Any Doxygen warning fails the build;
# --strict also fails on a declaration of the header without a comment.
set -eu
cd "$(dirname "$0")/.."
strict=""
[ "${1:-}" = --strict ] && { strict="EXTRACT_ALL = NO
WARN_IF_UNDOCUMENTED = YES"; shift; }
out=${1:-build/docs}
command -v doxygen >/dev/null || scripts/install-deps.sh docs
version=$(awk '/#define PE_VERSION_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END {print v}' include/posenc.h)
mkdir -p "$out"
{ cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out"; echo "PROJECT_NUMBER = $version"; printf "$strict\n"; } | doxygen -
echo "make-docs: $out/html/index.html (libposenc $version)"
