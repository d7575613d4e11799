"""End-to-end fixtures: the whole stack as real processes (simcluster in process mode, the
controller, the facade), started once per test module through a blocking portal so its event
loop and child processes are not mistaken for a test's leaks. Tests use a fresh owner each
and release what they create; ``stack_clean`` checks nothing of theirs is left."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.stack import StackSettings
from tests.support.stack import RunningStack, running_stack


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
    request: pytest.FixtureRequest,
) -> Iterator[RunningStack]:
    """Per module; a module's ``STACK`` dict overrides settings (e.g. profile, nodes)."""
    workdir = Path(tmp_path_factory.mktemp("stack"))
    overrides = getattr(request.module, "STACK", {})
    defaults: dict[str, Any] = {
        "tenants": ("dev", "other"),
        "quota_pods": {"other": 3},
        "facade_replicas": 2,
        "extra_classes": ({"name": "huge", "cpu": "64", "memory": "1Gi"},),
        "max_sandboxes": 600,
        "create_rate_per_s": 2000,
        "create_burst": 600,
        # Short retention so released/finished pods leave quickly; GC every 0.5 s.
        "controller_args": ("--gc-terminal-retention-s", "2"),
    }
    settings = StackSettings(workdir=workdir, **(defaults | overrides))
    with running_stack(settings, pytestconfig) as running:
        yield running


@pytest.fixture
def owner() -> str:
    return f"run-{uuid.uuid4().hex[:10]}"
