"""Tests that need something of the machine `make test` cannot install into a virtualenv (root,
a writable cgroup hierarchy) skip where it is missing, say a developer's laptop, and say why
(``pytest -ra`` prints the reason). Under CI (``CI`` set, as CI services do) they fail
instead: CI runs as root on Debian 12 where `make test` provides everything, so a skip
there would only hide that a test never ran."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["in_ci", "missing"]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def missing(reason: str) -> NoReturn:
    """Skip the calling test (fail it under CI) because ``reason``."""
    if in_ci():
        pytest.fail(f"CI must run this test, but {reason}", pytrace=False)
    pytest.skip(reason)
