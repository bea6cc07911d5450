"""The package stands alone: its build backend makes an sdist and a wheel
(the wheel carrying the compiled module and a libposenc.so.0), pip installs
the wheel into a venv WITHOUT the system site packages (numpy made visible by
a .pth file), and `import posenc` works there once the sources it was built
from are gone. The library is the one under test (libposenc=<path>), so no
CMake build runs here; scripts/check-python-package.sh does the whole thing,
CMake included, from the sdist."""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import numpy as np
import pytest

import posenc
from conftest import REPO, HERE


def header_version():
    header = (REPO / "include" / "posenc.h").read_text()
    return ".".join(re.search(r"#define PE_VERSION_%s (\d+)" % p, header).group(1)
                    for p in ("MAJOR", "MINOR", "PATCH"))


def backend(tmp_path, hook, **env):
    """Run a PEP 517 hook of the package's backend, as pip would, in a
    subprocess; returns the file name it made in tmp_path/dist."""
    code = ("import sys; sys.path.insert(0, 'build_backend'); import posenc_build; "
            "print(posenc_build.%s(sys.argv[1]))" % hook)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist")],
                       cwd=str(HERE.parent), env=dict(os.environ, **env),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return tmp_path / "dist" / r.stdout.split()[-1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("build")
    return (backend(tmp, "build_sdist"),
            backend(tmp, "build_wheel", POSENC_LIBPOSENC=posenc.library_path()))


def test_sdist_carries_the_sources_and_no_build_output(built):
    sdist, _ = built
    base = "posenc-%s/" % header_version()
    assert sdist.name == "posenc-%s.tar.gz" % header_version()
    with tarfile.open(sdist) as t:
        names = set(t.getnames())
    for need in ("PKG-INFO", "pyproject.toml", "build_backend/posenc_build.py",
                 "posenc/__init__.py", "posenc/_posenc.c", "posenc/tools/pick.py",
                 "tests/conftest.py", "libposenc/CMakeLists.txt", "libposenc/LICENSE",
                 "libposenc/include/posenc.h", "libposenc/src/posenc.map",
                 "libposenc/cmake/install.cmake"):
        assert base + need in names, need
    assert any(n.startswith(base + "libposenc/tests/data/configs/") for n in names)
    assert not [n for n in names if n.endswith((".so", ".pyc")) or ".so." in n]


def test_wheel_layout(built):
    _, wheel = built
    v = header_version()
    assert re.fullmatch(r"posenc-%s-cp3\d+-cp3\d+\w*-linux_\w+\.whl" % re.escape(v), wheel.name)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read("posenc-%s.dist-info/METADATA" % v).decode()
        record = z.read("posenc-%s.dist-info/RECORD" % v).decode()
    assert "posenc/libposenc.so.0" in names
    assert [n for n in names if re.fullmatch(r"posenc/_posenc\..*\.so", n)]
    assert "posenc/_posenc.c" not in names
    assert "Version: %s\n" % v in meta and "Requires-Dist: numpy\n" in meta
    assert {line.split(",")[0] for line in record.splitlines()} == names


def _clean_venv(path):
    """A venv without the system site packages; numpy (and what sits beside
    it: pytest, torch) visible through a .pth file, as the README says."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True)
    site = subprocess.run([str(path / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    numpy_dir = os.path.dirname(os.path.dirname(np.__file__))
    with open(os.path.join(site, "system-packages.pth"), "w") as f:
        f.write(numpy_dir + "\n")
    return site


PROBE = """
import numpy as np, posenc
print(posenc.version()); print(posenc.library_path()); print(posenc.__file__)
c = posenc.RopeCache(head_dim=8, max_positions=4)
q = np.ones((1, 1, 2, 8), np.float32)
c.apply_(q)
assert q[0, 0, 1, 0] != 1.0
"""


def test_wheel_installs_into_a_clean_venv_and_stands_alone(tmp_path, built):
    if subprocess.run([sys.executable, "-c", "import ensurepip"],
                      capture_output=True).returncode != 0:
        pytest.fail("python3-venv is needed (scripts/install-deps.sh python)")
    _, wheel = built
    # the wheel, away from any source tree, is all pip gets
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(wheel, copy)
    venv = tmp_path / "venv"
    site = _clean_venv(venv)
    env = {k: v for k, v in os.environ.items() if k not in ("POSENC_LIBRARY", "PYTHONPATH")}
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index",
                        str(copy / wheel.name)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    shutil.rmtree(copy)
    r = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    version, lib, pkg = r.stdout.split()
    assert version == header_version()
    assert lib == os.path.join(site, "posenc", "libposenc.so.0")   # its own copy
    assert pkg == os.path.join(site, "posenc", "__init__.py")


@pytest.mark.parametrize("tools,missing", [((), "no C compiler found"),
                                           (("cc", "as", "ld"), "cmake is not installed")])
def test_a_missing_tool_is_named(tmp_path, tools, missing):
    # PATH holds this Python and the tools given, nothing else
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        os.symlink(shutil.which(tool), bin_dir / tool)
    code = ("import sys; sys.path.insert(0, 'build_backend'); import posenc_build; "
            "posenc_build.build_wheel(sys.argv[1])")
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "POSENC_LIBPOSENC")}
    env["PATH"] = str(bin_dir)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist")], cwd=str(HERE.parent),
                       env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "posenc build: " + missing in r.stderr
    assert not (tmp_path / "dist").exists() or not os.listdir(tmp_path / "dist")
