"""Alias of posenc.tools.pick (kept so that `python -m posenc.pick` keeps working)."""
import sys

from .tools.pick import *  # noqa: F401,F403
from .tools.pick import main

if __name__ == "__main__":
    sys.exit(main())
