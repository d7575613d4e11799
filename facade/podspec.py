"""The sandbox contract: how one sandbox request becomes one Pod.

Everything the rest of Sandman relies on about a sandbox pod is decided here, in one pure
function, and pinned by a golden file (tests/facade/golden/): the labels the controller's
garbage collector selects on, the annotations carrying expiry, idle timeout, the request's
digest and a group, the scheduler name the bulk binder watches for, and the hardening every
sandbox gets (no service-account token, no service links, never restarted blank). The task
image is used unmodified: the daemon arrives through a volume and is the container's command.

Why the hardening is here and not left to the cluster: the code a sandbox runs is hostile,
and the pod is the last place Sandman decides anything about it. Every pod meets Pod
Security `restricted` as rendered (tests/facade/test_pod_security.py creates them in a
namespace enforcing it): seccomp ``RuntimeDefault``, every capability dropped (NET_RAW
included: no raw sockets, no ARP/ICMP spoofing of neighbours), no privilege escalation, and
``hostUsers: false`` so an unmodified image's root is not root on the node — the user
namespace is what lets a root image meet `restricted` at all (upstream relaxes runAsNonRoot
for such pods). A class may add capabilities back or run without a user namespace; either
is a per-class relaxation the operator must pair with the tenant namespace's level
(docs/operator-guide.md, "Pod hardening").

Why the request is the wire model itself (``CreateSandbox``): the create request is defined
once, and validated once, when the facade decodes it (facade/params.py: a 400 with a reason
naming the field). A copy of its fields here would be one more definition to keep equal, and
a second validator one more to keep agreeing. Direct callers (tests, load/ benchmarks) build
a ``CreateSandbox``; one that takes input from outside validates it as the facade does, with
``msgspec.convert(data, CreateSandbox)``.
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
    token_digest,
)
from daemon.sandbox.settings import DaemonSettings
from kube.contract import (
    ANNOTATION_EXPIRES_AT,
    ANNOTATION_GROUP,
    ANNOTATION_GROUP_SIZE,
    ANNOTATION_IDLE_TIMEOUT,
    ANNOTATION_REQUEST_DIGEST,
    ANNOTATION_TOKEN_SALT,
    LABEL_CLASS,
    LABEL_OWNER,
    LABEL_SANDBOX,
    LABEL_TENANT,
    SCHEDULER_NAME,
)
from kube.pool_contract import LABEL_POOL, LABEL_STANDING
from kube.times import format_time
from sandman.base.settings import env_of
from sandman.wire.facade import LABEL_VALUE_PATTERN, CreateSandbox

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
    "SandboxClass",
    "container_security",
    "render_pod",
    "render_pool_template",
]

USER_LABEL_PREFIX = "user.sandman.io/"
#: A class's name labels its pods: facade/config.py checks each configured name with this.
LABEL_VALUE = re.compile(LABEL_VALUE_PATTERN)


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
    user_namespace: bool = True
    """``hostUsers: false``: the image's root is an unprivileged user on the node. Off only
    for runtimes without user namespaces (a root image then needs `baseline`)."""
    capabilities: tuple[str, ...] = ()
    """Added back after dropping ALL; only ``NET_BIND_SERVICE`` keeps `restricted`
    (docs/operator-guide.md, "Pod hardening": what each one lets a task image do)."""


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


def render_pod(
    request: CreateSandbox,
    sandbox_class: SandboxClass,
    delivery: DaemonDelivery,
    *,
    name: str,
    namespace: str,
    tenant: str,
    token: str,
    now: datetime,
    token_salt: str = "",
    digest: str | None = None,
    group: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """The Pod manifest for one sandbox of ``request`` (validated when it was decoded), of
    ``sandbox_class`` (the request's class, resolved by the caller). ``digest``: what the
    Idempotency-Key was used for (the request's digest); ``group``: the batch's group name
    and size, for the binder's all-or-nothing placement; ``token_salt``: what ``token`` was
    derived with (facade/tokens.py), kept in the pod for the facade to derive it again."""
    resources = {"cpu": sandbox_class.cpu, "memory": sandbox_class.memory}
    if sandbox_class.ephemeral_storage:
        resources["ephemeral-storage"] = sandbox_class.ephemeral_storage
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [_task_container(request, delivery, resources, token, sandbox_class)],
    }
    if sandbox_class.user_namespace:
        spec["hostUsers"] = False
    _add_placement(spec, sandbox_class)
    _add_delivery(spec, delivery, sandbox_class)
    expires = now + timedelta(seconds=request.ttl_s)
    annotations = {ANNOTATION_EXPIRES_AT: format_time(expires)}
    if request.idle_timeout_s:
        annotations[ANNOTATION_IDLE_TIMEOUT] = str(request.idle_timeout_s)
    if token_salt:
        annotations[ANNOTATION_TOKEN_SALT] = token_salt
    if digest is not None:
        annotations[ANNOTATION_REQUEST_DIGEST] = digest
    if group is not None:
        annotations[ANNOTATION_GROUP], annotations[ANNOTATION_GROUP_SIZE] = group[0], str(group[1])
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


def render_pool_template(
    image: str,
    sandbox_class: SandboxClass,
    delivery: DaemonDelivery,
    *,
    announcement: str,
    namespace: str,
    tenant: str,
    pool_token: str,
    expires_at: datetime | None,
) -> dict[str, Any]:
    """The pod template of an announcement's pool pods (kube/pool_contract.pool_pod makes
    each slot's pod of it): a sandbox pod as :func:`render_pod` renders it — the same class,
    hardening and delivery, so a claimed sandbox is a cold one in every respect — but with no
    owner (a claim's owner lives in its SandboxClaim), no request digest, the announcement's
    expiry (an unclaimed pool pod is deleted with its announcement: nothing lingers), the pool
    token and the daemon told it is a pool sandbox (it serves its claim only).
    ``expires_at`` None: a standing pool's (facade/standing.py): no expiry, the
    ``sandman.io/standing`` label, and nothing of the time in the template, so every facade
    replica renders the same one."""
    now = datetime.now(UTC) if expires_at is None else datetime.now(expires_at.tzinfo)
    ttl = 3600 if expires_at is None else max(1, int((expires_at - now).total_seconds()))
    request = CreateSandbox(image=image, owner="pool", sandbox_class=sandbox_class.name, ttl_s=ttl)
    pod = render_pod(
        request,
        sandbox_class,
        delivery,
        name=f"{announcement}-template",
        namespace=namespace,
        tenant=tenant,
        token=pool_token,
        now=now,
    )
    meta = pod["metadata"]
    del meta["labels"][LABEL_OWNER]
    meta["labels"][LABEL_POOL] = announcement
    if expires_at is None:
        del meta["annotations"][ANNOTATION_EXPIRES_AT]
        meta["labels"][LABEL_STANDING] = "true"
    else:
        meta["annotations"][ANNOTATION_EXPIRES_AT] = format_time(expires_at)
    (container,) = pod["spec"]["containers"]
    container["env"].append({"name": env_of(DaemonSettings, "pooled"), "value": "1"})
    return pod


def container_security(sandbox_class: SandboxClass) -> dict[str, Any]:
    """Every container's hardening: no privilege escalation (setuid binaries and file
    capabilities grant nothing: no_new_privs), every capability dropped but the class's."""
    capabilities: dict[str, Any] = {"drop": ["ALL"]}
    if sandbox_class.capabilities:
        capabilities["add"] = list(sandbox_class.capabilities)
    return {"allowPrivilegeEscalation": False, "capabilities": capabilities}


def _task_container(
    request: CreateSandbox,
    delivery: DaemonDelivery,
    resources: dict[str, str],
    token: str,
    sandbox_class: SandboxClass,
) -> dict[str, Any]:
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(request.env.items())]
    env += [
        # The verifier, never the token: whoever reads the pod cannot drive the sandbox.
        {"name": env_of(DaemonSettings, "token_sha256"), "value": token_digest(token).hex()},
        {"name": "SANDMAN_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    if request.idle_timeout_s:
        idle = env_of(DaemonSettings, "idle_timeout_s")  # the name the daemon reads it by
        env.append({"name": idle, "value": str(request.idle_timeout_s)})
    container: dict[str, Any] = {
        "name": "sandbox",
        "image": request.image,
        "command": delivery.command(),
        "env": env,
        "ports": [{"name": "daemon", "containerPort": DAEMON_PORT, "protocol": "TCP"}],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": container_security(sandbox_class),
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


def _add_delivery(
    spec: dict[str, Any], delivery: DaemonDelivery, sandbox_class: SandboxClass
) -> None:
    if delivery.mode == "local-process":
        return
    if delivery.mode == "init-container":
        spec["initContainers"] = [
            {
                "name": "sandman-bundle",
                "image": delivery.bundle_image,
                "command": ["/bin/busybox", "cp", "-a", f"{delivery.mount}/.", "/bundle/"],
                "volumeMounts": [{"name": "sandman", "mountPath": "/bundle"}],
                "securityContext": container_security(sandbox_class),
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
