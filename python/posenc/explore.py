"""Alias of posenc.tools.explore (kept so that `python -m posenc.explore` keeps working)."""
import sys

from .tools.explore import *  # noqa: F401,F403
from .tools.explore import main

if __name__ == "__main__":
    sys.exit(main())
