"""Library lookup order: POSENC_LIBRARY, next to the package, the system."""
import os
import shutil
import subprocess
import sys

import pytest

import posenc
from conftest import REPO

PROBE = "import posenc; print(posenc.library_path())"


def probe(pythonpath, **env_set):
    env = {k: v for k, v in os.environ.items() if k not in ("POSENC_LIBRARY",)}
    env["PYTHONPATH"] = str(pythonpath)
    env.update(env_set)
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          cwd="/")


@pytest.fixture
def lib_file():
    return posenc.library_path()


def test_env_variable_file_and_directory(lib_file):
    r = probe(REPO / "python", POSENC_LIBRARY=lib_file)
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(r.stdout.strip()) == os.path.realpath(lib_file)
    d = os.path.dirname(lib_file)
    if os.path.exists(os.path.join(d, "libposenc.so.0")):
        r = probe(REPO / "python", POSENC_LIBRARY=d)
        assert r.returncode == 0, r.stderr


def test_env_variable_wrong_path_fails_without_fallback(tmp_path):
    r = probe(REPO / "python", POSENC_LIBRARY=str(tmp_path / "nope.so"))
    assert r.returncode != 0
    assert "POSENC_LIBRARY" in r.stderr and "ImportError" in r.stderr


def test_next_to_the_package(tmp_path, lib_file):
    pkg = tmp_path / "posenc"
    shutil.copytree(REPO / "python" / "posenc", pkg,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(lib_file, pkg / "libposenc.so.0")
    r = probe(tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(pkg / "libposenc.so.0")


def test_source_checkout_build(tmp_path, lib_file):
    # A checkout's python/posenc finds <checkout>/build/libposenc.so.0 with
    # nothing set (issue 20: it used to need POSENC_LIBRARY).
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "python" / "posenc", root / "python" / "posenc",
                    ignore=shutil.ignore_patterns("__pycache__", "libposenc.so*"))
    (root / "include").mkdir()
    shutil.copy(REPO / "include" / "posenc.h", root / "include" / "posenc.h")
    (root / "build").mkdir()
    shutil.copy(lib_file, root / "build" / "libposenc.so.0")
    r = probe(root / "python")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(root / "build" / "libposenc.so.0")


def test_system_loader(tmp_path, lib_file):
    # Outside a checkout, LD_LIBRARY_PATH reaches dlopen("libposenc.so.0").
    shutil.copytree(REPO / "python" / "posenc", tmp_path / "site" / "posenc",
                    ignore=shutil.ignore_patterns("__pycache__", "libposenc.so*"))
    libdir = tmp_path / "lib"
    libdir.mkdir()
    shutil.copy(lib_file, libdir / "libposenc.so.0")
    r = probe(tmp_path / "site", LD_LIBRARY_PATH=str(libdir))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(libdir / "libposenc.so.0")


def test_nothing_found_says_what_was_tried(tmp_path):
    shutil.copytree(REPO / "python" / "posenc", tmp_path / "site" / "posenc",
                    ignore=shutil.ignore_patterns("__pycache__", "libposenc.so*"))
    r = probe(tmp_path / "site", LD_LIBRARY_PATH=str(tmp_path))
    if r.returncode == 0:
        pytest.skip("a libposenc.so.0 is installed system-wide: %s" % r.stdout.strip())
    assert "POSENC_LIBRARY" in r.stderr and "build/" in r.stderr


NO_TORCH = """
import sys
sys.modules["torch"] = None          # import torch raises ImportError
import numpy as np, posenc
c = posenc.RopeCache(head_dim=8, max_positions=4)
q = np.ones((1, 1, 2, 8), np.float32)
c.apply_(q)
assert q[0, 0, 1, 0] != 1.0
try:
    import posenc.torch
except ImportError:
    print("ok")
"""


def test_works_without_torch():
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    r = subprocess.run([sys.executable, "-c", NO_TORCH], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
