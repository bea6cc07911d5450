"""Alias of posenc.tools.explore: `python -m posenc.explore` and `from posenc import explore`
keep working (the module is posenc.tools.explore itself)."""
import sys

from .tools import explore as _tool

if __name__ == "__main__":
    sys.exit(_tool.main())
else:
    sys.modules[__name__] = _tool
