"""Alias of posenc.tools.pick: `python -m posenc.pick` and `from posenc import pick`
keep working (the module is posenc.tools.pick itself)."""
import sys

from .tools import pick as _tool

if __name__ == "__main__":
    sys.exit(_tool.main())
else:
    sys.modules[__name__] = _tool
