#!/bin/sh
# The Python package on its own, for each Python given (default: the python3
# on PATH and /usr/bin/python3, each once):
#   1. copy the checkout's files (tracked and untracked, not ignored) to a
#      temporary directory, and from that copy build the sdist (the package's
#      own PEP 517 backend, as a frontend calls it);
#   2. pip wheel the sdist (CMake builds libposenc inside), pip install the
#      wheel into one clean venv and the sdist into another - venvs WITHOUT
#      the system site packages, Debian's numpy, pytest and torch made
#      visible by a .pth file naming /usr/lib/python3/dist-packages (for a
#      Python of Debian's version, 3.11; another needs its own numpy and
#      pytest in the venv: the script says so and stops);
#   3. delete the checkout copy and the unpacked sources, check that
#      `import posenc` works and uses the library inside the venv, then run
#      the package's tests (from a fresh unpack of the sdist) in each venv,
#      from a directory outside every source tree.
# Usage: scripts/check-python-package.sh [PYTHON...]   (no network needed)
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
[ $# -gt 0 ] || set -- python3 /usr/bin/python3
dist_packages=/usr/lib/python3/dist-packages
work=$(mktemp -d "${TMPDIR:-/tmp}/posenc-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
say() { echo "check-python-package: $*"; }
fail() { echo "check-python-package: $*" >&2; exit 1; }

seen="" n=0
for py in "$@"; do
  exe=$(command -v "$py" 2>/dev/null) || fail "$py: no such Python"
  exe=$("$exe" -c 'import os, sys; print(os.path.realpath(sys.executable))')
  case " $seen " in *" $exe "*) continue ;; esac
  seen="$seen $exe"
  ver=$("$exe" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  say "$py ($exe, Python $ver)"
  "$exe" -c 'import venv, ensurepip' 2>/dev/null ||
    fail "$py cannot make venvs (Debian: apt-get install python3-venv)"
  n=$((n + 1))
  w="$work/$n"
  mkdir -p "$w/checkout" "$w/dist"

  # 1. the checkout's copy and its sdist
  (cd "$repo" && git ls-files -z -co --exclude-standard | xargs -0 tar cf - --) |
    tar xf - -C "$w/checkout"
  sdist=$(cd "$w/checkout/python" && "$exe" -c '
import sys
sys.path.insert(0, "build_backend")
import posenc_build
print(posenc_build.build_sdist(sys.argv[1]))' "$w/dist")
  say "  sdist $sdist"

  # 2. two clean venvs: the wheel built from the sdist, and the sdist itself
  for kind in wheel sdist; do
    v="$w/venv-$kind"
    "$exe" -m venv "$v"
    site=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if [ -d "$dist_packages" ] && [ "$ver" = "$("/usr/bin/python3" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" ]; then
      echo "$dist_packages" > "$site/debian-dist-packages.pth"
    fi
    "$v/bin/python" -c 'import numpy, pytest' 2>/dev/null ||
      fail "$py: numpy and pytest are not importable in a venv of Python $ver (Debian's python3-numpy and python3-pytest serve its Python $("/usr/bin/python3" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo '?') only): install them for this Python first"
  done
  "$w/venv-wheel/bin/python" -m pip wheel -q --no-deps --no-index -w "$w/dist" "$w/dist/$sdist" \
    > "$w/wheel.log" 2>&1 || { cat "$w/wheel.log" >&2; fail "pip wheel $sdist failed"; }
  wheel=$(cd "$w/dist" && ls posenc-*.whl)
  say "  wheel $wheel (from the sdist)"
  "$w/venv-wheel/bin/python" -m pip install -q --no-index "$w/dist/$wheel" > "$w/install-wheel.log" 2>&1 ||
    { cat "$w/install-wheel.log" >&2; fail "pip install $wheel failed"; }
  "$w/venv-sdist/bin/python" -m pip install -q --no-index "$w/dist/$sdist" > "$w/install-sdist.log" 2>&1 ||
    { cat "$w/install-sdist.log" >&2; fail "pip install $sdist failed"; }

  # 3. no sources left; then import and the tests
  rm -rf "$w/checkout"
  mkdir "$w/elsewhere"
  for kind in wheel sdist; do
    v="$w/venv-$kind"
    out=$(cd "$w/elsewhere" && env -u POSENC_LIBRARY -u PYTHONPATH -u LD_LIBRARY_PATH "$v/bin/python" -c '
import numpy as np, posenc
q = np.ones((1, 1, 2, 8), np.float32)
posenc.RopeCache(head_dim=8, max_positions=4).apply_(q)
assert q[0, 0, 1, 0] != 1.0
print(posenc.version(), posenc.library_path(), posenc.__file__)') ||
      fail "import posenc failed in the $kind venv once the sources were deleted"
    case "$out" in *"$v/"*"/posenc/libposenc.so.0 $v/"*) ;;
      *) fail "the $kind venv's posenc does not use its own library: $out" ;; esac
    say "  $kind venv, sources deleted: posenc $out"
    rm -rf "$w/tests"
    mkdir "$w/tests"
    tar xzf "$w/dist/$sdist" -C "$w/tests"
    (cd "$w/elsewhere" && env -u POSENC_LIBRARY -u PYTHONPATH -u LD_LIBRARY_PATH \
      "$v/bin/python" -m pytest -q -p no:cacheprovider "$w/tests/${sdist%.tar.gz}/tests") > "$w/pytest-$kind.log" 2>&1 ||
      { tail -n 60 "$w/pytest-$kind.log" >&2; fail "the package's tests failed in the $kind venv"; }
    say "  $kind venv: $(tail -n 1 "$w/pytest-$kind.log")"
  done
done
say "ok"
