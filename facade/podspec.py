"""The sandbox contract: how one sandbox request becomes one Pod.

Everything the rest of Sandman relies on about a sandbox pod is decided here, in one pure
function, and pinned by a golden file (tests/facade/golden/): the labels the controller's
garbage collector selects on, the annotations carrying expiry and idle timeout, the scheduler
name the bulk binder watches for, and the hardening every sandbox gets (no service-account
token, no service links, never restarted blank). The task image is used unmodified: the
daemon arrives through a volume and is the container's command.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from daemon.sandbox.layout import (
    BUNDLE_MOUNT,
    DAEMON_PORT,
    LOADERS,
    bundle_command,
    python_command,
)
from kube.contract import (
    ANNOTATION_EXPIRES_AT,
    ANNOTATION_IDLE_TIMEOUT,
    LABEL_CLASS,
    LABEL_OWNER,
    LABEL_SANDBOX,
    LABEL_TENANT,
    SCHEDULER_NAME,
)
from sandman.wire.facade import (
    DEFAULT_TTL_S,
    LABEL_NAME_PATTERN,
    LABEL_VALUE_PATTERN,
    RESERVED_ENV_PREFIX,
)

__all__ = [
    "ANNOTATION_EXPIRES_AT",
    "ANNOTATION_IDLE_TIMEOUT",
    "DAEMON_PORT",
    "LABEL_CLASS",
    "LABEL_OWNER",
    "LABEL_SANDBOX",
    "LABEL_TENANT",
    "LABEL_VALUE",
    "SCHEDULER_NAME",
    "DaemonDelivery",
    "PodSpecError",
    "SandboxClass",
    "SandboxRequest",
    "render_pod",
]

USER_LABEL_PREFIX = "user.sandman.io/"
# The wire model checks these on decoding already; render_pod checks again for direct callers.
LABEL_VALUE = re.compile(LABEL_VALUE_PATTERN)
LABEL_NAME = re.compile(LABEL_NAME_PATTERN)
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$(?!\n)")


class PodSpecError(ValueError):
    """The request cannot become a valid Pod; ``reason`` is machine-readable."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SandboxClass:
    """An operator-defined shape, e.g. ``tiny``: resources and placement constraints."""

    name: str
    cpu: str = "250m"
    memory: str = "512Mi"
    ephemeral_storage: str | None = "1Gi"
    runtime_class: str | None = None
    priority_class: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class DaemonDelivery:
    """How the daemon reaches the pod (docs/daemon-bundle.md).

    ``init-container`` copies the bundle into an emptyDir; ``image-volume`` mounts the bundle
    image directly; ``host-path`` mounts what the node agent unpacked; ``local-process`` is
    simcluster's process mode, where the "container" is a local process running the daemon
    from this Python installation.
    """

    mode: Literal["init-container", "image-volume", "host-path", "local-process"]
    bundle_image: str = ""
    host_path: str = "/var/lib/sandman/bundle"
    mount: str = BUNDLE_MOUNT
    loader: str = LOADERS["x86_64"]
    """The bundle's loader for the nodes' architecture (the facade's own may differ)."""
    python: tuple[str, ...] = ()

    def command(self) -> list[str]:
        """The daemon's argv (daemon/sandbox/layout.py, shared with the bundle builder)."""
        host = "$(SANDMAN_POD_IP)"
        if self.mode == "local-process":
            return python_command(self.python, host=host)
        return bundle_command(host=host, mount=self.mount, loader=self.loader)


@dataclass(frozen=True, slots=True)
class SandboxRequest:
    """What the pod is rendered from: the facade fills every field from the decoded
    ``CreateSandbox``; the default TTL is the wire model's (for direct callers: benchmarks,
    tests)."""

    image: str
    owner: str
    ttl_s: int = DEFAULT_TTL_S
    idle_timeout_s: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


def render_pod(
    request: SandboxRequest,
    sandbox_class: SandboxClass,
    delivery: DaemonDelivery,
    *,
    name: str,
    namespace: str,
    tenant: str,
    token: str,
    now: datetime,
) -> dict[str, Any]:
    """The Pod manifest for one sandbox. Raises PodSpecError for invalid input."""
    _validate(request)
    resources = {"cpu": sandbox_class.cpu, "memory": sandbox_class.memory}
    if sandbox_class.ephemeral_storage:
        resources["ephemeral-storage"] = sandbox_class.ephemeral_storage
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "containers": [_task_container(request, delivery, resources, token)],
    }
    _add_placement(spec, sandbox_class)
    _add_delivery(spec, delivery)
    expires = (now + timedelta(seconds=request.ttl_s)).astimezone(UTC)
    annotations = {ANNOTATION_EXPIRES_AT: expires.strftime("%Y-%m-%dT%H:%M:%SZ")}
    if request.idle_timeout_s:
        annotations[ANNOTATION_IDLE_TIMEOUT] = str(request.idle_timeout_s)
    labels = {f"{USER_LABEL_PREFIX}{k}": v for k, v in sorted(request.labels.items())}
    labels |= {
        LABEL_SANDBOX: name,
        LABEL_TENANT: tenant,
        LABEL_OWNER: request.owner,
        LABEL_CLASS: sandbox_class.name,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def _task_container(
    request: SandboxRequest, delivery: DaemonDelivery, resources: dict[str, str], token: str
) -> dict[str, Any]:
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(request.env.items())]
    env += [
        {"name": "SANDMAN_TOKEN", "value": token},
        {"name": "SANDMAN_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    if request.idle_timeout_s:
        env.append({"name": "SANDMAN_IDLE_TIMEOUT", "value": str(request.idle_timeout_s)})
    container: dict[str, Any] = {
        "name": "sandbox",
        "image": request.image,
        "command": delivery.command(),
        "env": env,
        "ports": [{"name": "daemon", "containerPort": DAEMON_PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": DAEMON_PORT},
            "periodSeconds": 1,
            "failureThreshold": 3,
        },
    }
    if delivery.mode != "local-process":
        mount = {"name": "sandman", "mountPath": delivery.mount, "readOnly": True}
        if delivery.mode == "image-volume":
            # The bundle image holds the bundle at the mount path (where the init
            # container's copy takes it from), not at its root: mount that directory.
            mount["subPath"] = delivery.mount.strip("/")
        container["volumeMounts"] = [mount]
    return container


def _add_placement(spec: dict[str, Any], sandbox_class: SandboxClass) -> None:
    if sandbox_class.runtime_class:
        spec["runtimeClassName"] = sandbox_class.runtime_class
    if sandbox_class.priority_class:
        spec["priorityClassName"] = sandbox_class.priority_class
    if sandbox_class.node_selector:
        spec["nodeSelector"] = dict(sandbox_class.node_selector)
    if sandbox_class.tolerations:
        spec["tolerations"] = [dict(t) for t in sandbox_class.tolerations]


def _add_delivery(spec: dict[str, Any], delivery: DaemonDelivery) -> None:
    if delivery.mode == "local-process":
        return
    if delivery.mode == "init-container":
        spec["initContainers"] = [
            {
                "name": "sandman-bundle",
                "image": delivery.bundle_image,
                "command": ["/bin/busybox", "cp", "-a", f"{delivery.mount}/.", "/bundle/"],
                "volumeMounts": [{"name": "sandman", "mountPath": "/bundle"}],
                "resources": {
                    "requests": {"cpu": "10m", "memory": "16Mi"},
                    "limits": {"cpu": "100m", "memory": "32Mi"},
                },
            }
        ]
        spec["volumes"] = [{"name": "sandman", "emptyDir": {"sizeLimit": "64Mi"}}]
    elif delivery.mode == "image-volume":
        spec["volumes"] = [
            {
                "name": "sandman",
                "image": {"reference": delivery.bundle_image, "pullPolicy": "IfNotPresent"},
            }
        ]
    else:
        spec["volumes"] = [
            {"name": "sandman", "hostPath": {"path": delivery.host_path, "type": "Directory"}}
        ]


def _validate(request: SandboxRequest) -> None:
    if not request.image or any(c.isspace() or c == "\0" for c in request.image):
        raise PodSpecError(f"invalid image reference {request.image!r}", "invalid_image")
    if not LABEL_VALUE.search(request.owner) or not request.owner:
        raise PodSpecError(f"owner {request.owner!r} is not a valid label value", "invalid_owner")
    if request.ttl_s <= 0:
        raise PodSpecError("ttl_s must be positive", "invalid_ttl")
    for key, value in request.labels.items():
        if not LABEL_NAME.search(key) or not LABEL_VALUE.search(value):
            raise PodSpecError(f"label {key}={value!r} is not valid", "invalid_label")
    for key, value in request.env.items():
        if key.startswith(RESERVED_ENV_PREFIX) or not ENV_NAME.search(key) or "\0" in value:
            raise PodSpecError(
                f"environment variable {key!r} is reserved ({RESERVED_ENV_PREFIX}*) or invalid",
                "invalid_env",
            )
