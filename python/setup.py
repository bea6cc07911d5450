"""Build glue for pyproject.toml: the version from the C header (the one
place it is written) and the source checkout recorded in the installed
package, so that an installed posenc finds <checkout>/build/libposenc.so.0.

    pip install --no-build-isolation ./python      (from the checkout's root)
"""
import os
import re

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)
HEADER = os.path.join(CHECKOUT, "include", "posenc.h")


def header_version():
    with open(HEADER) as f:
        text = f.read()
    parts = [re.search(r"#define PE_VERSION_%s (\d+)" % p, text) for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise SystemExit("setup.py: PE_VERSION_MAJOR/MINOR/PATCH not found in %s" % HEADER)
    return ".".join(m.group(1) for m in parts)


class build_py_with_checkout(build_py):
    """Writes posenc/_checkout.py (CHECKOUT = this source tree) into the build."""

    def run(self):
        super().run()
        path = os.path.join(self.build_lib, "posenc", "_checkout.py")
        with open(path, "w") as f:
            f.write('"""Written by setup.py: the source checkout this package was built from."""\n'
                    "CHECKOUT = %r\n" % CHECKOUT)


setup(version=header_version(), cmdclass={"build_py": build_py_with_checkout})
