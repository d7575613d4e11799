"""``python -m load.soak``: the soak (see load/soak/cli.py)."""

import sys

from load.soak.cli import main

sys.exit(main())
