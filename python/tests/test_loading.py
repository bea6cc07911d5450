"""Library lookup order: POSENC_LIBRARY, next to the package, the checkout's
build/, the system - each probed with a copy of the package under test (its
compiled module included) in a directory of its own."""
import os
import shutil
import subprocess
import sys

import pytest

import posenc
from conftest import REPO, PACKAGE

PROBE = "import posenc; print(posenc.library_path())"


def probe(pythonpath, **env_set):
    env = {k: v for k, v in os.environ.items() if k not in ("POSENC_LIBRARY",)}
    env["PYTHONPATH"] = str(pythonpath)
    env.update(env_set)
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          cwd="/")


def copy_package(to):
    """The package under test without a library next to it."""
    shutil.copytree(PACKAGE, to, ignore=shutil.ignore_patterns("__pycache__", "libposenc.so*"))


@pytest.fixture
def lib_file():
    return posenc.library_path()


def test_env_variable_file_and_directory(tmp_path, lib_file):
    copy_package(tmp_path / "posenc")
    r = probe(tmp_path, POSENC_LIBRARY=lib_file)
    assert r.returncode == 0, r.stderr
    assert os.path.realpath(r.stdout.strip()) == os.path.realpath(lib_file)
    d = os.path.dirname(lib_file)
    if os.path.exists(os.path.join(d, "libposenc.so.0")):
        r = probe(tmp_path, POSENC_LIBRARY=d)
        assert r.returncode == 0, r.stderr


def test_env_variable_wrong_path_fails_without_fallback(tmp_path, lib_file):
    copy_package(tmp_path / "posenc")
    shutil.copy(lib_file, tmp_path / "posenc" / "libposenc.so.0")   # not taken
    r = probe(tmp_path, POSENC_LIBRARY=str(tmp_path / "nope.so"))
    assert r.returncode != 0
    assert "POSENC_LIBRARY" in r.stderr and "ImportError" in r.stderr


def test_next_to_the_package(tmp_path, lib_file):
    pkg = tmp_path / "posenc"
    copy_package(pkg)
    shutil.copy(lib_file, pkg / "libposenc.so.0")
    r = probe(tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(pkg / "libposenc.so.0")


def test_source_checkout_build(tmp_path, lib_file):
    # A checkout's python/posenc finds <checkout>/build/libposenc.so.0 with
    # nothing set.
    root = tmp_path / "checkout"
    copy_package(root / "python" / "posenc")
    (root / "include").mkdir()
    shutil.copy(REPO / "include" / "posenc.h", root / "include" / "posenc.h")
    (root / "build").mkdir()
    shutil.copy(lib_file, root / "build" / "libposenc.so.0")
    r = probe(root / "python")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(root / "build" / "libposenc.so.0")


def test_system_loader(tmp_path, lib_file):
    # Outside a checkout, LD_LIBRARY_PATH reaches dlopen("libposenc.so.0").
    copy_package(tmp_path / "site" / "posenc")
    libdir = tmp_path / "lib"
    libdir.mkdir()
    shutil.copy(lib_file, libdir / "libposenc.so.0")
    r = probe(tmp_path / "site", LD_LIBRARY_PATH=str(libdir))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(libdir / "libposenc.so.0")


def test_nothing_found_says_what_was_tried(tmp_path):
    copy_package(tmp_path / "site" / "posenc")
    r = probe(tmp_path / "site", LD_LIBRARY_PATH=str(tmp_path))
    if r.returncode == 0:
        pytest.skip("a libposenc.so.0 is installed system-wide: %s" % r.stdout.strip())
    assert "POSENC_LIBRARY" in r.stderr and "build/" in r.stderr


def test_missing_compiled_module_says_how_to_build_it(tmp_path, lib_file):
    pkg = tmp_path / "posenc"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__", "_posenc.*.so"))
    r = probe(tmp_path, POSENC_LIBRARY=lib_file)
    assert r.returncode != 0
    assert "posenc._posenc" in r.stderr and "make python" in r.stderr
    assert "pip install ./python" in r.stderr


def test_library_older_than_the_header_is_refused(tmp_path, lib_file, monkeypatch):
    # The compiled module records the header it was built with; a library of
    # a lower version may lack functions the package calls.
    from posenc import _ext
    monkeypatch.setattr(_ext.ext, "HEADER_VERSION", "%d.999.0" % _lib_major())
    with pytest.raises(ImportError, match="older than the"):
        _ext.bind()


def _lib_major():
    return int(posenc.version().split(".")[0])


def test_missing_numpy_says_so():
    r = subprocess.run([sys.executable, "-c", "import sys; sys.modules['numpy'] = None; "
                        "import posenc"], env=dict(os.environ, PYTHONPATH=str(PACKAGE.parent)),
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "posenc needs numpy" in r.stderr and "python3-numpy" in r.stderr


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
    env = dict(os.environ, PYTHONPATH=str(PACKAGE.parent))
    r = subprocess.run([sys.executable, "-c", NO_TORCH], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
