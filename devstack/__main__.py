"""``python -m devstack`` is the ``sandman-dev`` command."""

import sys

from .cli import main

sys.exit(main())
