"""The sandbox contract, pinned by golden files: what a sandbox Pod looks like."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from daemon.sandbox import layout
from daemon.sandbox.settings import DaemonSettings
from facade.podspec import (
    DaemonDelivery,
    PodSpecError,
    SandboxClass,
    SandboxRequest,
    render_pod,
)
from facade.proxy import DaemonProxy

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
        ({"env": {"SANDMAN_LOG_LEVEL": "bogus"}}, "invalid_env"),  # the whole prefix
        ({"env": {"1=2": "x"}}, "invalid_env"),
        ({"env": {"OK": "a\0b"}}, "invalid_env"),
        ({"owner": "run-1\n"}, "invalid_owner"),
        ({"labels": {"k": "v\n"}}, "invalid_label"),
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


@pytest.mark.parametrize("mode", ["init-container", "image-volume", "host-path"])
def test_pod_starts_the_daemon_as_the_bundle_layout_says(mode: str) -> None:
    """The renderer and the bundle builder share daemon/sandbox/layout.py: same argv, port
    and mount, and the daemon listens where the probe and the facade's proxy knock."""
    delivery = DaemonDelivery(mode, bundle_image="b:1")  # type: ignore[arg-type]
    pod = render_pod(
        REQUEST, TINY, delivery, name="sb-x", namespace="ns", tenant="t", token="tok", now=NOW
    )
    container = pod["spec"]["containers"][0]
    assert container["command"] == layout.bundle_command(
        host="$(SANDMAN_POD_IP)", loader=layout.LOADERS["x86_64"]
    )
    assert container["volumeMounts"][0]["mountPath"] == layout.BUNDLE_MOUNT
    ports = {
        container["ports"][0]["containerPort"],
        container["readinessProbe"]["httpGet"]["port"],
        DaemonProxy().port,
        DaemonSettings(token="t").port,
    }
    assert ports == {layout.DAEMON_PORT}


def test_local_process_pods_run_the_daemon_module() -> None:
    delivery = DaemonDelivery("local-process", python=("/py",))
    pod = render_pod(
        REQUEST, TINY, delivery, name="sb-x", namespace="ns", tenant="t", token="tok", now=NOW
    )
    argv = pod["spec"]["containers"][0]["command"]
    assert argv == ["/py", "-m", layout.ENTRY_MODULE, "--host", "$(SANDMAN_POD_IP)",
                    "--port", str(layout.DAEMON_PORT)]  # fmt: skip
