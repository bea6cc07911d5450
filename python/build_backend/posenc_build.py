"""The build backend of the posenc package (PEP 517), in the package's own
tree and needing nothing but the standard library, a C compiler and, for
the library, CMake: it builds wherever pip runs - any CPython >= 3.9, a
fresh venv, no network, with or without --no-build-isolation - since no
setuptools, wheel or other build requirement has to be installed.

A wheel holds
  posenc/*.py                 the binding
  posenc/_posenc<EXT_SUFFIX>  the compiled hot path (compiled here from
                              posenc/_posenc.c against include/posenc.h)
  posenc/libposenc.so.0       the C library, built by CMake from the
                              repository's sources - unless told otherwise:
The library comes from the `libposenc` setting (pip install
--config-settings libposenc=..., or the environment variable
POSENC_LIBPOSENC):
  build (default)  configure and build it with CMake (BUILD_TESTING and
                   the benchmarks off), then carry the shared object;
  system           carry none: the installed libposenc.so.0 is found through
                   the dynamic loader at import, which checks its version;
  <path>           carry this already built libposenc.so.0 (a `make build`
                   output), without CMake.
An sdist holds python/ (the package, its tests, this backend) and, in
libposenc/, the C sources CMake needs (CMakeLists.txt, include/, src/,
cmake/, LICENSE) and what the tests read (tests/data/configs,
docs/explore.md).

From a source checkout, `python3 python/build_backend/posenc_build.py
--inplace` compiles posenc/_posenc for that python3 next to the sources (what
`make python` runs), so that PYTHONPATH=python works.
"""
import base64
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

NAME = "posenc"
PY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # python/ or the sdist
#: What of the repository an sdist carries (under libposenc/): what CMake
#: builds the library from, and what the package's tests read (the configs,
#: the decision table of docs/explore.md).
REPO_FILES = ("CMakeLists.txt", "LICENSE", "include", "src", "cmake",
              os.path.join("tests", "data", "configs"), os.path.join("docs", "explore.md"))
_SKIP_DIRS = {"__pycache__", ".git", "build", ".pytest_cache"}


class BuildError(SystemExit):
    """A sentence saying what is missing; pip shows it and stops."""

    def __init__(self, message):
        super().__init__("posenc build: " + message)


def source_root():
    """The C sources: the sdist's libposenc/, or the checkout around python/."""
    for root in (os.path.join(PY_DIR, "libposenc"), os.path.dirname(PY_DIR)):
        if os.path.isfile(os.path.join(root, "include", "posenc.h")) and \
                os.path.isfile(os.path.join(root, "CMakeLists.txt")):
            return root
    raise BuildError("the C sources of libposenc are not here: build from the repository's "
                     "python/ directory (pip install ./python) or from the package's sdist")


def version():
    """MAJOR.MINOR.PATCH of include/posenc.h, the one place it is written."""
    with open(os.path.join(source_root(), "include", "posenc.h")) as f:
        text = f.read()
    parts = [re.search(r"#define PE_VERSION_%s (\d+)" % p, text) for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise BuildError("PE_VERSION_MAJOR/MINOR/PATCH not found in include/posenc.h")
    return ".".join(m.group(1) for m in parts)


def metadata():
    with open(os.path.join(PY_DIR, "README.md")) as f:
        readme = f.read()
    return "\n".join([
        "Metadata-Version: 2.1",
        "Name: %s" % NAME,
        "Version: %s" % version(),
        "Summary: Python binding of libposenc: positional encodings (RoPE, ALiBi, T5, "
        "sinusoidal, learned) for transformer inference on the CPU",
        "License: MIT",
        "License-File: LICENSE",
        "Requires-Python: >=3.9",
        "Requires-Dist: numpy",
        "Provides-Extra: torch",
        "Requires-Dist: torch; extra == \"torch\"",
        "Provides-Extra: plots",
        "Requires-Dist: matplotlib; extra == \"plots\"",
        "Description-Content-Type: text/markdown",
        "",
        readme,
    ])


# ---- compiling ---------------------------------------------------------------

def _compiler():
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    argv = shlex.split(cc)
    if not shutil.which(argv[0]):
        found = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
        if found is None:
            raise BuildError("no C compiler found (%s, cc, gcc, clang): install one (Debian: "
                             "apt-get install gcc)" % argv[0])
        argv = [found]
    return argv


def _python_includes():
    paths = sysconfig.get_paths()
    dirs = [paths["include"]]
    if paths.get("platinclude") and paths["platinclude"] != paths["include"]:
        dirs.append(paths["platinclude"])
    if not os.path.isfile(os.path.join(dirs[0], "Python.h")):
        raise BuildError("Python.h is not in %s: install the headers of this Python (%s; Debian: "
                         "apt-get install python%d.%d-dev)"
                         % (dirs[0], sys.executable, sys.version_info[0], sys.version_info[1]))
    return dirs


def extension_filename():
    return "_posenc" + sysconfig.get_config_var("EXT_SUFFIX")


def compile_extension(out_dir, werror=False):
    """posenc/_posenc.c -> out_dir/_posenc<EXT_SUFFIX> for this interpreter.
    The module does not link libposenc (posenc._lib hands it the functions),
    so only the header is needed."""
    if sys.implementation.name != "cpython":
        raise BuildError("posenc's compiled module is for CPython; this is %s"
                         % sys.implementation.name)
    src = os.path.join(PY_DIR, NAME, "_posenc.c")
    out = os.path.join(out_dir, extension_filename())
    argv = _compiler() + ["-shared", "-fPIC", "-O2", "-std=c11", "-fvisibility=hidden",
                          "-Wall", "-Wextra", "-Wshadow", "-Wno-missing-field-initializers"]
    if werror:
        argv.append("-Werror")
    argv += ["-I" + d for d in _python_includes()]
    argv += ["-I" + os.path.join(source_root(), "include"), src, "-o", out]
    os.makedirs(out_dir, exist_ok=True)
    print("posenc build: " + " ".join(shlex.quote(a) for a in argv), file=sys.stderr)
    r = subprocess.run(argv)
    if r.returncode:
        raise BuildError("compiling %s failed (the compiler's output is above)" % src)
    return out


def _jobs():
    return str(max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                   else os.cpu_count() or 1))


def build_library(work_dir):
    """libposenc.so.0 built by CMake from the sources, into work_dir; the
    path of the shared object."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BuildError("cmake is not installed, and building libposenc needs it (Debian: "
                         "apt-get install cmake pkg-config libsleef-dev libcjson-dev "
                         "libhwloc-dev; scripts/install-deps.sh build). Or install libposenc "
                         "first and build with --config-settings libposenc=system")
    build = os.path.join(work_dir, "cmake-build")
    configure = [cmake, "-S", source_root(), "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DBUILD_TESTING=OFF", "-DPE_BUILD_BENCH=OFF"]
    for step, argv in (("configuring", configure),
                       ("building", [cmake, "--build", build, "--target", "posenc",
                                     "-j", _jobs()])):
        print("posenc build: " + " ".join(shlex.quote(a) for a in argv), file=sys.stderr)
        r = subprocess.run(argv, stdout=sys.stderr)
        if r.returncode:
            raise BuildError("%s libposenc with CMake failed (its output is above). It needs "
                             "pkg-config and the development files of sleef and cJSON, hwloc "
                             "optional (Debian: apt-get install pkg-config libsleef-dev "
                             "libcjson-dev libhwloc-dev)" % step)
    lib = os.path.join(build, "libposenc.so.0")
    if not os.path.exists(lib):
        raise BuildError("CMake built no %s" % lib)
    return os.path.realpath(lib)


def _library_setting(config_settings):
    value = (config_settings or {}).get("libposenc") or os.environ.get("POSENC_LIBPOSENC") \
        or "build"
    if value not in ("build", "system") and not os.path.isfile(value):
        raise BuildError("libposenc=%s: expected build, system or the path of a built "
                         "libposenc.so.0" % value)
    return value


# ---- archives ----------------------------------------------------------------

def _walk(root, rel=""):
    """(path, relative name) of the files below root/rel, sorted, without
    caches and build outputs."""
    top = os.path.join(root, rel)
    if os.path.isfile(top):
        yield top, rel
        return
    for d, dirs, files in os.walk(top):
        dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS and not x.endswith(".egg-info"))
        for f in sorted(files):
            if f.endswith((".pyc", ".so", ".o")) or ".so." in f:
                continue
            path = os.path.join(d, f)
            yield path, os.path.relpath(path, root)


def _package_files():
    """The binding's Python files: (path, name in the wheel)."""
    return [(p, rel) for p, rel in _walk(PY_DIR, NAME) if rel.endswith(".py")]


def _tag():
    interp = "cp%d%d" % sys.version_info[:2]
    soabi = sysconfig.get_config_var("SOABI") or ""
    m = re.match(r"cpython-(\d+)(\w*)", soabi)
    abi = "cp%s%s" % (m.group(1), m.group(2)) if m else interp
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "%s-%s-%s" % (interp, abi, plat)


def _dist_info_files(tag):
    name = "%s-%s.dist-info" % (NAME, version())
    with open(os.path.join(source_root(), "LICENSE"), "rb") as f:
        license_text = f.read()
    return name, [
        (name + "/METADATA", metadata().encode()),
        (name + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: posenc_build\nRoot-Is-Purelib: false\n"
                           "Tag: %s\n" % tag).encode()),
        (name + "/top_level.txt", (NAME + "\n").encode()),
        (name + "/LICENSE", license_text),
    ]


def _zip_write(z, name, data, executable=False):
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (0o755 if executable else 0o644) << 16
    z.writestr(info, data)


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


# ---- PEP 517 hooks -----------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name, files = _dist_info_files(_tag())
    for rel, data in files:
        path = os.path.join(metadata_directory, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    library = _library_setting(config_settings)
    tag = _tag()
    with tempfile.TemporaryDirectory(prefix="posenc-build-") as work:
        members = []
        for path, rel in _package_files():
            with open(path, "rb") as f:
                members.append((rel, f.read(), False))
        ext = compile_extension(work)
        with open(ext, "rb") as f:
            members.append((NAME + "/" + extension_filename(), f.read(), True))
        if library != "system":
            so = build_library(work) if library == "build" else library
            with open(so, "rb") as f:
                members.append((NAME + "/libposenc.so.0", f.read(), True))
        dist_info, meta = _dist_info_files(tag)
        members += [(rel, data, False) for rel, data in meta]
        wheel = "%s-%s-%s.whl" % (NAME, version(), tag)
        os.makedirs(wheel_directory, exist_ok=True)
        with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as z:
            record = []
            for rel, data, executable in members:
                _zip_write(z, rel, data, executable)
                record.append(_record_line(rel, data))
            record.append(dist_info + "/RECORD,,")
            _zip_write(z, dist_info + "/RECORD", ("\n".join(record) + "\n").encode())
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, version())
    root = source_root()
    entries = [(os.path.join(PY_DIR, f), f) for f in ("pyproject.toml", "README.md")]
    for top in (NAME, "tests", "build_backend"):
        entries += [(p, rel) for p, rel in _walk(PY_DIR, top)]
    for rel in REPO_FILES:
        entries += [(p, os.path.join("libposenc", r)) for p, r in _walk(root, rel)]
    sdist = base + ".tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    with tarfile.open(os.path.join(sdist_directory, sdist), "w:gz", format=tarfile.PAX_FORMAT) as t:
        def add(name, data, mode=0o644):
            info = tarfile.TarInfo(base + "/" + name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            t.addfile(info, io.BytesIO(data))
        add("PKG-INFO", metadata().encode())
        for path, rel in entries:
            with open(path, "rb") as f:
                add(rel, f.read(), 0o755 if os.access(path, os.X_OK) else 0o644)
    return sdist


# ---- from a checkout -------------------------------------------------------------

def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="Compile posenc._posenc for this Python next to "
                                             "the package's sources (python/posenc).")
    ap.add_argument("--inplace", action="store_true", required=True)
    ap.add_argument("--werror", action="store_true", help="warnings are errors")
    args = ap.parse_args(argv)
    out = compile_extension(os.path.join(PY_DIR, NAME), werror=args.werror)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1:])
