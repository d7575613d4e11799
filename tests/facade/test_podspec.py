"""The sandbox contract, pinned by golden files: what a sandbox Pod looks like."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from controller.facade.podspec import (
    DaemonDelivery,
    PodSpecError,
    SandboxClass,
    SandboxRequest,
    render_pod,
)

GOLDEN = Path(__file__).parent / "golden"
NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
TINY = SandboxClass(
    name="tiny",
    runtime_class="gvisor",
    priority_class="sandman-sandbox",
    node_selector={"pool": "sandboxes"},
    tolerations=({"key": "sandman.io/sandboxes", "operator": "Exists", "effect": "NoSchedule"},),
)
REQUEST = SandboxRequest(
    image="registry.example/tasks/django-1234:latest",
    owner="run-42",
    ttl_s=7200,
    idle_timeout_s=900,
    env={"TASK_ID": "django-1234"},
    labels={"experiment": "grpo-7"},
)


@pytest.mark.parametrize(
    "delivery",
    [
        DaemonDelivery("init-container", bundle_image="registry.example/sandman-bundle:0.1.0"),
        DaemonDelivery("host-path"),
        DaemonDelivery("local-process", python=("/usr/bin/python3",)),
    ],
    ids=lambda d: d.mode,
)
def test_pod_matches_golden(delivery: DaemonDelivery) -> None:
    pod = render_pod(
        REQUEST,
        TINY,
        delivery,
        name="sb-0123456789abcdef",
        namespace="sandman-a",
        tenant="team-a",
        token="tok",
        now=NOW,
    )
    path = GOLDEN / f"pod-{delivery.mode}.json"
    rendered = json.dumps(pod, indent=2, sort_keys=True) + "\n"
    if os.environ.get("SANDMAN_UPDATE_GOLDEN"):
        path.write_text(rendered)
    assert rendered == path.read_text(), "SANDMAN_UPDATE_GOLDEN=1 pytest ... to accept a change"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"image": ""}, "invalid_image"),
        ({"image": "a b"}, "invalid_image"),
        ({"owner": "not a label value"}, "invalid_owner"),
        ({"ttl_s": 0}, "invalid_ttl"),
        ({"labels": {"bad key!": "x"}}, "invalid_label"),
        ({"env": {"SANDMAN_TOKEN": "steal"}}, "invalid_env"),
        ({"env": {"1=2": "x"}}, "invalid_env"),
    ],
)
def test_invalid_requests_have_reasons(change: dict[str, object], reason: str) -> None:
    fields = {"image": REQUEST.image, "owner": REQUEST.owner, **change}
    with pytest.raises(PodSpecError) as info:
        render_pod(
            SandboxRequest(**fields),
            TINY,
            DaemonDelivery("host-path"),
            name="sb-x",  # type: ignore[arg-type]
            namespace="ns",
            tenant="t",
            token="tok",
            now=NOW,
        )
    assert info.value.reason == reason
