"""``python -m load.faults``: the fault benchmark (see load/faults/cli.py)."""

import sys

from load.faults.cli import main

sys.exit(main())
