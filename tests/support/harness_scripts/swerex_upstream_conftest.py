"""SWE-ReX's runtime-generic tests (its tests/test_execution.py) pointed at Sandman: this file
is the ``conftest.py`` of a scratch copy of those tests (tests/support/swerex_upstream.py
lays it out, from a checkout of SWE-ReX's repository, nothing of it kept in this project).

Its ``remote_runtime`` fixture, which upstream gives as a ``RemoteRuntime`` on a local
``swerex-remote`` server, is here a :class:`SandmanRuntime` on a sandbox of its own per test
(``SandmanDeployment``, released afterwards), so each test runs against Sandman unchanged.
The facade comes from ``SANDMAN_URL``/``SANDMAN_TOKEN``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import pytest
from swerex.runtime.abstract import CloseBashSessionRequest, CreateBashSessionRequest

from sandman.integrations.swerex import SandmanDeployment

# The tests import these two from their conftest (`from .conftest import _Action`).
from .upstream_conftest import _Action, _Command  # noqa: F401

IMAGE = os.environ.get("SWEREX_IMAGE", "registry.example/tasks/swerex-upstream:1")


@pytest.fixture
async def remote_runtime() -> AsyncIterator[Any]:
    deployment = SandmanDeployment(image=IMAGE, labels={"suite": "swe-rex-upstream"})
    await deployment.start()
    try:
        yield deployment.runtime
    finally:
        await deployment.stop()


@pytest.fixture
async def runtime_with_default_session(remote_runtime: Any) -> AsyncIterator[Any]:
    await remote_runtime.create_session(CreateBashSessionRequest())
    try:
        yield remote_runtime
    finally:
        await remote_runtime.close_session(CloseBashSessionRequest())
