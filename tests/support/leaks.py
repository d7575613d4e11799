"""What the suite's leak checks (tests/conftest.py) share with fixtures that start processes
on purpose."""

from __future__ import annotations

import pytest

__all__ = ["FIXTURE_PIDS"]

#: Processes a module- or session-scoped fixture started during a test (e.g. a restarted
#: facade): owned by the fixture, not leaked by the test. Their children are exempt too.
FIXTURE_PIDS = pytest.StashKey[set[int]]()
