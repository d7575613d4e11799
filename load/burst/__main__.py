"""``python -m load.burst``: the reference burst benchmark (see load/burst/cli.py).

SIGTERM ends a run as Ctrl-C does (KeyboardInterrupt): the stack's processes are stopped on
the way out. Without it a terminated run left its simcluster, controller and facade running
(seen: an hour of a 2-core machine's CPU and a held pod network).
"""

import signal
import sys

from load.burst.cli import main


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, _interrupt)
sys.exit(main())
