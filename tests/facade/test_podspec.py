"""The sandbox contract, pinned by golden files: what a sandbox Pod looks like, rendered
from the wire model itself (one definition of the request, one validation: the model's)."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from daemon.sandbox import layout
from daemon.sandbox.settings import DaemonSettings
from facade.podspec import DaemonDelivery, SandboxClass, render_pod, render_pool_template
from facade.proxy import DaemonProxy
from kube.contract import (
    ANNOTATION_EXPIRES_AT,
    ANNOTATION_GROUP,
    ANNOTATION_GROUP_SIZE,
    ANNOTATION_REQUEST_DIGEST,
    LABEL_OWNER,
)
from kube.pool_contract import LABEL_POOL, pool_pod, pool_pod_name
from sandman.base.settings import env_of
from sandman.wire.facade import CreateSandbox

GOLDEN = Path(__file__).parent / "golden"
NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
TINY = SandboxClass(
    name="tiny",
    runtime_class="gvisor",
    priority_class="sandman-sandbox",
    node_selector={"pool": "sandboxes"},
    tolerations=({"key": "sandman.io/sandboxes", "operator": "Exists", "effect": "NoSchedule"},),
)
REQUEST = CreateSandbox(
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
    ("change", "field"),
    [
        ({"image": ""}, "image"),
        ({"image": "a b"}, "image"),
        ({"owner": "not a label value"}, "owner"),
        ({"ttl_s": 0}, "ttl_s"),
        ({"labels": {"bad key!": "x"}}, "labels"),
        ({"env": {"SANDMAN_TOKEN": "steal"}}, "env"),
        ({"env": {"SANDMAN_LOG_LEVEL": "bogus"}}, "env"),  # the whole prefix
        ({"env": {"1=2": "x"}}, "env"),
        ({"env": {"OK": "a\0b"}}, "env"),
        ({"owner": "run-1\n"}, "owner"),
        ({"labels": {"k": "v\n"}}, "labels"),
    ],
)
def test_invalid_requests_never_reach_the_renderer(change: dict[str, object], field: str) -> None:
    """What cannot become a valid Pod is refused when the request is decoded, naming the
    field (the facade answers 400 with the field's reason: facade/params.py)."""
    fields = {"image": REQUEST.image, "owner": REQUEST.owner, **change}
    with pytest.raises(msgspec.ValidationError, match=re.escape(f"`$.{field}")):
        msgspec.convert(fields, CreateSandbox)


def test_the_digest_and_the_group_are_annotations_of_the_pod() -> None:
    pod = render_pod(
        REQUEST, TINY, DaemonDelivery("host-path"), name="sb-x", namespace="ns", tenant="t",
        token="tok", now=NOW, digest="d" * 32, group=("g1", 16),
    )  # fmt: skip
    annotations = pod["metadata"]["annotations"]
    assert annotations[ANNOTATION_REQUEST_DIGEST] == "d" * 32
    assert (annotations[ANNOTATION_GROUP], annotations[ANNOTATION_GROUP_SIZE]) == ("g1", "16")


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


def test_a_pool_pod_is_a_cold_pod_of_its_class_with_the_pool_token_and_no_owner() -> None:
    """A pool pod (kube/pool_contract.pool_pod of the facade's template) differs from a cold
    sandbox of the same class and image only where a claim decides: name, owner, digest,
    expiry (the announcement's), the token (the pool's) and the daemon's pool switch."""
    delivery = DaemonDelivery("host-path")
    expires = datetime(2026, 11, 29, 13, 0, 0, tzinfo=UTC)
    template = render_pool_template(
        "registry.example/first:1",
        TINY,
        delivery,
        announcement="prep-7",
        namespace="sandman-a",
        tenant="team-a",
        pool_token="pool-tok",
        expires_at=expires,
    )
    pooled = pool_pod(template, "prep-7", 3, REQUEST.image, 11)
    name = pool_pod_name("prep-7", 3, 11)
    cold = render_pod(
        CreateSandbox(image=REQUEST.image, owner="x", ttl_s=60),
        TINY,
        delivery,
        name=name,
        namespace="sandman-a",
        tenant="team-a",
        token="pool-tok",
        now=NOW,
    )
    assert pooled["metadata"]["name"] == name
    assert pooled["metadata"]["labels"] == {
        **{k: v for k, v in cold["metadata"]["labels"].items() if k != LABEL_OWNER},
        LABEL_POOL: "prep-7",
    }
    assert pooled["metadata"]["annotations"] == {ANNOTATION_EXPIRES_AT: "2026-11-29T13:00:00Z"}
    (container,) = pooled["spec"]["containers"]
    (cold_container,) = cold["spec"]["containers"]
    pooled_env = env_of(DaemonSettings, "pooled")
    assert {"name": pooled_env, "value": "1"} in container["env"]
    assert [e for e in container["env"] if e["name"] != pooled_env] == cold_container["env"]
    assert container["image"] == REQUEST.image
    assert {**pooled["spec"], "containers": None} == {**cold["spec"], "containers": None}
    assert template["spec"]["containers"][0]["image"] == "registry.example/first:1"  # untouched
