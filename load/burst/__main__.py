"""``python -m load.burst``: the reference burst benchmark (see load/burst/cli.py)."""

import sys

from load.burst.cli import main

sys.exit(main())
