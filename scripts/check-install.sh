#!/bin/sh
# check-install.sh - install libposenc from a build directory and use it as a
# newcomer would, with nothing in the environment to help: LD_LIBRARY_PATH is
# unset for the whole script, so every program must find the library the way
# the README says (its run path, or the loader's cache after `ldconfig`).
#
#  1. private prefix: install to a temporary prefix, check what landed there
#     (files, links, SONAME, posenc.pc: `--cflags` is exactly the include
#     directory), run the README's private-prefix commands (sections
#     "Install" and "Examples", as written), build every example with the
#     CMake package and with pkg-config and run them; the Python binding with
#     POSENC_LIBRARY.
#  2. system prefix /usr/local: the README's /usr/local commands as written
#     (`cmake --install build --prefix /usr/local && ldconfig`, then the
#     examples), plus a program linked without any run path, which only the
#     `ldconfig` step makes runnable, and the Python binding found through
#     the loader alone. Needs root and unshare(1): it runs in a private mount
#     namespace with overlays on /usr/local and /etc (ldconfig's
#     ld.so.cache), so the machine's own /usr/local and loader cache are
#     never touched (safe on a shared machine too). Skipped, with a message,
#     without root or unshare.
#  3. scripts/check-readme.sh: every C block of the README is a file of
#     examples/ (which 1 and 2 compile and run).
#
# Usage: scripts/check-install.sh [BUILD_DIR]   (default: build)
# Environment: KEEP=1 keeps the temporary directory; PYTHON (default
# /usr/bin/python3) runs the binding checks, skipped if it has no numpy;
# SYSTEM=0 skips part 2.
set -eu
unset LD_LIBRARY_PATH

src=$(cd "$(dirname "$0")/.." && pwd)
inner=""
[ "${1:-}" = --system-inner ] && { inner=$2; shift 2; }
build=${1:-build}
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
[ -f "$build/CMakeCache.txt" ] || { echo "check-install: $build is not a CMake build directory" >&2; exit 2; }
PYTHON=${PYTHON:-/usr/bin/python3}
fail() { echo "check-install: FAILED: $*" >&2; exit 1; }
step() { echo "== $*"; }
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:[A-Z]*=//p' "$build/CMakeCache.txt")
major=${version%%.*}
# The library directory the build was configured with (lib, lib64 or a
# Debian multiarch lib/<triplet>), relative to the prefix.
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$build/CMakeCache.txt")
libdir=${libdir:-lib}
have_numpy() { "$PYTHON" -c "import numpy" 2>/dev/null; }
EXAMPLES="quickstart hf_config rope_decode alibi_scores mla_decode qwen3_store gemma3_layers indexer_v32 deepseek_v4 dlopen_demo"

# The lines of the README's "## Install" and "## Examples" sh code blocks
# that contain $1 (a fixed string), comments and `make build` dropped, with
# the scratch paths made private: /tmp/ -> $tmp/, `build` -> the build
# directory checked, $HOME -> $tmp/home.
readme_lines() {
  awk '/^## /{sec = ($0 == "## Install" || $0 == "## Examples")}
       /^```/{inb = !inb && $0 == "```sh"; next} sec && inb' "$src/README.md" |
    sed -e 's/[[:space:]]*#.*$//' | grep -F -- "$1" | grep -v '^make build$' |
    sed -e "s|/tmp/|$tmp/|g" -e "s|--install build |--install \"$build\" |g"
}
run_readme() { # marker label
  n=0
  readme_lines "$1" > "$tmp/readme-$2.sh"
  [ -s "$tmp/readme-$2.sh" ] || fail "README: no Install/Examples line with $1"
  while IFS= read -r line; do
    n=$((n + 1))
    echo "-- README ($2): $line"
    (cd "$src" && HOME="$tmp/home" sh -ec "$line") > "$tmp/readme.log" 2>&1 \
      || { cat "$tmp/readme.log"; fail "README line: $line"; }
    tail -n 2 "$tmp/readme.log" | sed 's/^/   /'
  done < "$tmp/readme-$2.sh"
}
run_examples() { # dir label lib
  for ex in $EXAMPLES; do
    "$1/$ex" > "$tmp/ex.log" 2>&1 || { cat "$tmp/ex.log"; fail "$2: $ex exited with $?"; }
    echo "-- $2: $ex: $(tail -n 1 "$tmp/ex.log")"
  done
  # The linked examples must resolve libposenc to the installed copy.
  ldd "$1/quickstart" | grep -q "libposenc.so.$major => $3/" \
    || fail "$2: quickstart does not load $3/libposenc.so.$major"
}
python_check() { # label lib [env...]
  label=$1 l=$2
  shift 2
  if ! have_numpy; then echo "== Python binding ($label): skipped ($PYTHON has no numpy)"; return; fi
  step "Python binding ($label)"
  # A copy of the package outside the checkout: the one in python/ finds the
  # checkout's build/ first (its documented search order).
  rm -rf "$tmp/site" && mkdir -p "$tmp/site" && cp -r "$src/python/posenc" "$tmp/site/"
  (cd "$tmp" && env -u POSENC_LIBRARY "$@" PYTHONPATH="$tmp/site" \
     "$PYTHON" "$src/examples/rope_numpy.py") > "$tmp/python.log" 2>&1 \
    || { cat "$tmp/python.log"; fail "examples/rope_numpy.py ($label)"; }
  grep -q "from $l/libposenc.so" "$tmp/python.log" \
    || { cat "$tmp/python.log"; fail "the binding did not load $l/libposenc.so.$major"; }
  sed 's/^/   /' "$tmp/python.log"
}

# ---- 2. system prefix, inside the private mount namespace -------------------
if [ -n "$inner" ]; then
  tmp=$inner
  # Writes to /usr/local and /etc (ldconfig's /etc/ld.so.cache) go to
  # overlays in $tmp, seen only by this namespace.
  for d in /usr/local /etc; do
    o="$tmp/overlay$(echo "$d" | tr / _)"
    mkdir -p "$o/upper" "$o/work"
    mount -t overlay overlay -o "lowerdir=$d,upperdir=$o/upper,workdir=$o/work" "$d" 2>/dev/null \
      || { echo "== system prefix /usr/local: skipped (cannot mount an overlay on $d here)"; exit 0; }
  done
  mkdir -p "$tmp/home"
  lib=/usr/local/$libdir
  # First without `ldconfig`: a program without a run path must fail to find
  # the library (else nothing below would show that the documented step is
  # what makes it work).
  step "install to /usr/local without ldconfig: a program without run path must not start"
  cmake --install "$build" --prefix /usr/local >/dev/null
  # shellcheck disable=SC2046
  cc -std=c11 "$src/examples/quickstart.c" -o "$tmp/quickstart-norpath" $(pkg-config --cflags --libs posenc)
  if /sbin/ldconfig -p | grep -q "libposenc.so.$major "; then
    echo "-- before ldconfig: not checked: this machine's loader cache already lists libposenc.so.$major"
  elif "$tmp/quickstart-norpath" > "$tmp/norpath.log" 2>&1; then
    fail "a program without run path ran before ldconfig"
  else
    grep -q "libposenc.so.$major: cannot open shared object file" "$tmp/norpath.log" \
      || { cat "$tmp/norpath.log"; fail "unexpected failure before ldconfig"; }
    echo "-- before ldconfig: $(cat "$tmp/norpath.log")"
  fi
  run_readme /usr/local system
  [ -f /usr/local/include/posenc.h ] && [ -f "$lib/libposenc.so.$version" ] \
    || fail "the README's install line did not install into /usr/local"
  /sbin/ldconfig -p | grep -q "libposenc.so.$major .*=> $lib/libposenc.so.$major" \
    || fail "ldconfig does not list $lib/libposenc.so.$major"
  step "examples on /usr/local (pkg-config, CMake) and one built without a run path"
  mkdir -p "$tmp/sys-make"
  make --no-print-directory -s -C "$src/examples" OUT="$tmp/sys-make" >/dev/null
  cmake -S "$src/examples" -B "$tmp/sys-cmake" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$tmp/sys-cmake" -- --no-print-directory >/dev/null
  run_examples "$tmp/sys-make" "system pkg-config" "$lib"
  run_examples "$tmp/sys-cmake" "system cmake" "$lib"
  # What `ldconfig` is for: the same program, with no run path, now finds the
  # library in the loader's cache.
  readelf -d "$tmp/quickstart-norpath" | grep -q 'R.*PATH' && fail "quickstart-norpath has a run path"
  "$tmp/quickstart-norpath" >/dev/null || fail "a program without run path does not run after ldconfig"
  echo "-- no run path: quickstart runs (libposenc from the ld.so cache)"
  python_check "found through the loader alone" "$lib"
  exit 0
fi

# ---- 1. private prefix -------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/posenc-install.XXXXXX")
cleanup() { [ "${KEEP:-0}" = 1 ] && echo "check-install: kept $tmp" || rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$tmp/home"
prefix="$tmp/prefix"
lib="$prefix/$libdir"

step "build and install $build -> $prefix"
targets=posenc
grep -q '^PE_BUILD_BENCH:BOOL=ON' "$build/CMakeCache.txt" && targets="posenc pe-bench"
# shellcheck disable=SC2086
cmake --build "$build" --target $targets -- --no-print-directory >/dev/null
cmake --install "$build" --prefix "$prefix" >/dev/null

step "check the installed files"
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
(
  export PKG_CONFIG_PATH="$lib/pkgconfig"
  [ "$(pkg-config --modversion posenc)" = "$version" ] || fail "pkg-config reports another version"
  pkg-config --libs posenc | grep -q -- "-L$lib " || fail "posenc.pc does not point at $lib"
  cflags=$(pkg-config --cflags posenc | sed 's/ *$//')
  [ "$cflags" = "-I$prefix/include" ] \
    || fail "pkg-config --cflags posenc is '$cflags', not just -I$prefix/include"
)
# pe-bench (when the build has it) runs from the prefix and loads the library
# installed with it, through its run path relative to itself.
if grep -q '^PE_BUILD_BENCH:BOOL=ON' "$build/CMakeCache.txt"; then
  [ -x "$prefix/bin/pe-bench" ] || fail "bin/pe-bench missing"
  "$prefix/bin/pe-bench" --model list > "$tmp/pe-bench.log" 2>&1 \
    || { cat "$tmp/pe-bench.log"; fail "bin/pe-bench --model list failed"; }
  loaded=$(ldd "$prefix/bin/pe-bench" | sed -n "s/.*libposenc.so.$major => \([^ ]*\) .*/\1/p")
  [ -n "$loaded" ] && [ "$(readlink -f "$loaded")" = "$(readlink -f "$lib/libposenc.so.$major")" ] \
    || fail "bin/pe-bench loads '$loaded', not $lib/libposenc.so.$major"
fi
echo "   $(cd "$prefix" && find . -type f -o -type l | sort | tr '\n' ' ')"

step "the README's private-prefix commands, as written (HOME=$tmp/home)"
run_readme '$HOME' private
[ -f "$tmp/home/opt/posenc/include/posenc.h" ] || fail "the README's private install line installed nothing"

step "examples with the CMake package (find_package(posenc CONFIG))"
cmake -S "$src/examples" -B "$tmp/ex-cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/ex-cmake" -- --no-print-directory >/dev/null
run_examples "$tmp/ex-cmake" cmake "$lib"

step "examples with pkg-config"
mkdir -p "$tmp/ex-make"
PKG_CONFIG_PATH="$lib/pkgconfig" make --no-print-directory -s -C "$src/examples" OUT="$tmp/ex-make" >/dev/null
run_examples "$tmp/ex-make" pkg-config "$lib"

python_check "POSENC_LIBRARY=$lib/libposenc.so.$major" "$lib" POSENC_LIBRARY="$lib/libposenc.so.$major"

# ---- 2. system prefix --------------------------------------------------------
if [ "${SYSTEM:-1}" = 0 ]; then
  echo "== system prefix /usr/local: skipped (SYSTEM=0)"
elif [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null; then
  echo "== system prefix /usr/local: skipped (needs root and unshare)"
else
  step "system prefix /usr/local (private mount namespace: the machine's /usr/local is untouched)"
  if unshare --mount --propagation private true 2>/dev/null; then
    unshare --mount --propagation private "$0" --system-inner "$tmp" "$build"
  else
    echo "== system prefix /usr/local: skipped (unshare --mount is not permitted here)"
  fi
fi

# ---- 3. README code blocks ---------------------------------------------------
"$src/scripts/check-readme.sh"
echo "check-install: OK"
