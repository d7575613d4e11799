"""``python -m sandman``: the same as the ``sandman`` command (see :mod:`sandman.cli`)."""

import sys

from .cli import main

sys.exit(main())
