#!/bin/sh
# check-install.sh - install libposenc from a build directory into a temporary
# prefix, check what landed there, build examples/ against the install with
# the CMake package and with pkg-config, and run them; also import the Python
# binding against the installed library.
#
# Usage: scripts/check-install.sh [BUILD_DIR]   (default: build)
# Environment: KEEP=1 keeps the temporary directory; PYTHON (default
# /usr/bin/python3) runs the binding check, skipped if it has no numpy.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
[ -f "$build/CMakeCache.txt" ] || { echo "check-install: $build is not a CMake build directory" >&2; exit 2; }
PYTHON=${PYTHON:-/usr/bin/python3}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/posenc-install.XXXXXX")
cleanup() { [ "${KEEP:-0}" = 1 ] && echo "check-install: kept $tmp" || rm -rf "$tmp"; }
trap cleanup EXIT
prefix="$tmp/prefix"
fail() { echo "check-install: FAILED: $*" >&2; exit 1; }
step() { echo "== $*"; }

step "build and install $build -> $prefix"
cmake --build "$build" --target posenc >/dev/null
cmake --install "$build" --prefix "$prefix" >/dev/null

# The library directory the build was configured with (lib, lib64 or a
# Debian multiarch lib/<triplet>), relative to the prefix.
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build/CMakeCache.txt")
libdir=${libdir:-lib}
lib="$prefix/$libdir"

step "check the installed files"
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build/CMakeCache.txt")
major=${version%%.*}
[ -f "$prefix/include/posenc.h" ] || fail "include/posenc.h missing"
[ -f "$lib/libposenc.so.$version" ] && [ ! -L "$lib/libposenc.so.$version" ] \
  || fail "$libdir/libposenc.so.$version missing or not a regular file"
[ "$(readlink "$lib/libposenc.so.$major")" = "libposenc.so.$version" ] \
  || fail "libposenc.so.$major does not point to libposenc.so.$version"
[ "$(readlink "$lib/libposenc.so")" = "libposenc.so.$major" ] \
  || fail "libposenc.so does not point to libposenc.so.$major"
if command -v readelf >/dev/null; then
  readelf -d "$lib/libposenc.so.$version" | grep -q "SONAME.*\[libposenc.so.$major\]" \
    || fail "SONAME is not libposenc.so.$major"
fi
[ -f "$lib/pkgconfig/posenc.pc" ] || fail "$libdir/pkgconfig/posenc.pc missing"
for f in posencConfig.cmake posencConfigVersion.cmake posencTargets.cmake; do
  [ -f "$lib/cmake/posenc/$f" ] || fail "$libdir/cmake/posenc/$f missing"
done
export PKG_CONFIG_PATH="$lib/pkgconfig"
[ "$(pkg-config --modversion posenc)" = "$version" ] || fail "pkg-config reports another version"
pkg-config --libs posenc | grep -q -- "-L$lib " || fail "posenc.pc does not point at $lib"
echo "   $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"

export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
run_examples() { # dir label
  for ex in rope_decode alibi_scores dlopen_demo; do
    echo "-- $2: $ex"
    "$1/$ex" || fail "$2: $ex exited with $?"
  done
  # The linked examples must resolve libposenc to the installed copy.
  ldd "$1/rope_decode" | grep -q "libposenc.so.$major => $lib/" \
    || fail "$2: rope_decode does not load $lib/libposenc.so.$major"
}

step "examples with the CMake package (find_package(posenc CONFIG))"
cmake -S "$src/examples" -B "$tmp/ex-cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/ex-cmake" >/dev/null
run_examples "$tmp/ex-cmake" cmake

step "examples with pkg-config"
mkdir -p "$tmp/ex-make"
make --no-print-directory -s -C "$src/examples" OUT="$tmp/ex-make" >/dev/null
run_examples "$tmp/ex-make" pkg-config

if "$PYTHON" -c "import numpy" 2>/dev/null; then
  step "Python binding against the installed library (found as libposenc.so.$major)"
  # No POSENC_LIBRARY: the binding must find the install through the loader.
  # A copy of the package outside the checkout, which would find build/ first.
  mkdir -p "$tmp/site" && cp -r "$src/python/posenc" "$tmp/site/"
  (cd "$tmp" && env -u POSENC_LIBRARY PYTHONPATH="$tmp/site" \
     "$PYTHON" "$src/examples/rope_numpy.py") > "$tmp/python.log" 2>&1 \
    || { cat "$tmp/python.log"; fail "examples/rope_numpy.py"; }
  grep -q "from $lib/libposenc.so" "$tmp/python.log" \
    || { cat "$tmp/python.log"; fail "the binding did not load $lib/libposenc.so.$major"; }
  sed 's/^/   /' "$tmp/python.log"
else
  echo "== Python binding: skipped ($PYTHON has no numpy)"
fi
echo "check-install: OK"
