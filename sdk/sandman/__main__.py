"""``python -m sandman`` is the ``sandman`` command."""

import sys

from .cli import main

sys.exit(main())
