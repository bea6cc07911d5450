"""`pip install --no-build-isolation ./python` into a fresh venv (with the
system site packages, no network), then `import posenc` from another
directory: the version comes from the header, and the installed package finds
the library of the checkout it was built from."""
import os
import re
import shutil
import subprocess
import sys

import pytest

import posenc
from conftest import REPO


def test_pip_install_into_a_venv(tmp_path):
    if subprocess.run([sys.executable, "-c", "import ensurepip, setuptools"],
                      capture_output=True).returncode != 0:
        pytest.fail("python3-venv and python3-setuptools are needed (scripts/install-deps.sh)")
    # A checkout of its own: python/, the header, and a build/ with the library.
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "python", root / "python",
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info",
                                                  "libposenc.so*"))
    (root / "include").mkdir()
    shutil.copy(REPO / "include" / "posenc.h", root / "include")
    (root / "build").mkdir()
    shutil.copy(posenc.library_path(), root / "build" / "libposenc.so.0")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("POSENC_LIBRARY", "PYTHONPATH")}
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation", "--no-index",
                        "./python"], cwd=str(root), env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = subprocess.run([str(venv / "bin" / "python"), "-c",
                        "import posenc; print(posenc.version()); print(posenc.library_path()); "
                        "print(posenc.__file__)"],
                       cwd=str(elsewhere), env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    version, lib, pkg = r.stdout.split()
    header = (REPO / "include" / "posenc.h").read_text()
    want = ".".join(re.search(r"#define PE_VERSION_%s (\d+)" % p, header).group(1)
                    for p in ("MAJOR", "MINOR", "PATCH"))
    assert version == want
    assert lib == str(root / "build" / "libposenc.so.0")
    assert pkg.startswith(str(venv))          # the installed copy, not the checkout's
    r = subprocess.run([str(venv / "bin" / "pip"), "show", "posenc"], env=env,
                       capture_output=True, text=True)
    assert "Version: %s" % want in r.stdout
