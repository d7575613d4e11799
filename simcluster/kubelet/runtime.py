"""The container runtime interface of a simulated kubelet, and the ``virtual`` runtime.

A runtime turns a pod's containers into something that runs and can be probed and stopped.
The kubelet owns everything else (admission, image pulls, creation limits, latencies, status).
The interface is deliberately small so that the ``cri`` runtime (real containerd over its
socket, ``cri_runtime.py``) plugs in beside ``virtual`` and ``process``:

- ``start(sandbox)``: run every container of the sandbox; raise ``RuntimeStartError`` if one
  cannot start (the kubelet leaves the pod Pending with the containers waiting on the error's
  reason, e.g. ``CreateContainerError``, as the real kubelet does).
- ``probe(sandbox, container)``: one readiness check now (True = ready).
- ``exited(sandbox)``: ``(container, exit code)`` of a container that has stopped, else None.
- ``stop(sandbox, grace_s)``: SIGTERM, wait up to the grace period, SIGKILL; idempotent.
- ``close()``: stop everything (cluster shutdown).

``virtual`` runs nothing: start succeeds, probes pass, nothing exits — 10k pods cost only
memory for their API objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from simcluster.errors import SimclusterError
from simcluster.quantity import to_milli, to_units

__all__ = [
    "Container",
    "Probe",
    "Runtime",
    "RuntimeStartError",
    "Sandbox",
    "VirtualRuntime",
    "sandbox_from_pod",
]


class RuntimeStartError(SimclusterError):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Probe:
    http_path: str | None = None  # httpGet path; None with port set = tcpSocket
    port: int = 0
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    timeout_s: float = 1.0
    failure_threshold: int = 3


@dataclass(frozen=True, slots=True)
class Mount:
    """A volume mounted into a container: ``hostPath`` (source = a path on this machine)
    or ``emptyDir`` (source = None: a per-pod directory the runtime provides)."""

    volume: str
    target: str
    source: str | None = None
    read_only: bool = False

    def host_path(self, pod_dir: Path, uid: str) -> str:
        """Where the volume is on this machine: the hostPath, or the pod's emptyDir
        (``<pod_dir>/<pod uid>/<volume>``, created; the runtime removes ``<pod_dir>/<uid>``
        with the pod)."""
        if self.source is not None:
            return self.source
        directory = pod_dir / uid / self.volume
        directory.mkdir(parents=True, exist_ok=True)
        return str(directory)


@dataclass(frozen=True, slots=True)
class Security:
    """What a container's ``securityContext`` (and the pod's seccomp) asks the runtime to
    enforce: the capabilities dropped and added, ``no_new_privs``
    (``allowPrivilegeEscalation: false``), the seccomp profile type ("" when unset)."""

    drop: tuple[str, ...] = ()
    add: tuple[str, ...] = ()
    no_new_privs: bool = False
    seccomp: str = ""


def security_of(spec: Mapping[str, Any], container: Mapping[str, Any]) -> Security:
    sc = container.get("securityContext") or {}
    caps = sc.get("capabilities") or {}
    profile = sc.get("seccompProfile") or (spec.get("securityContext") or {}).get("seccompProfile")
    return Security(
        drop=tuple(str(c) for c in caps.get("drop") or ()),
        add=tuple(str(c) for c in caps.get("add") or ()),
        no_new_privs=sc.get("allowPrivilegeEscalation") is False,
        seccomp=str((profile or {}).get("type") or ""),
    )


@dataclass(frozen=True, slots=True)
class Container:
    name: str
    image: str
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    readiness: Probe | None = None
    mounts: tuple[Mount, ...] = ()
    working_dir: str = ""
    #: ``resources.limits`` (0: none): what a runtime that runs real containers enforces.
    cpu_limit_millis: int = 0
    memory_limit_bytes: int = 0
    #: ``resources.limits["ephemeral-storage"]`` (0: none): the kubelet evicts the pod when
    #: its usage exceeds the sum over its containers (storage.py).
    storage_limit_bytes: int = 0
    security: Security = Security()


@dataclass(frozen=True, slots=True)
class Sandbox:
    uid: str
    namespace: str
    name: str
    ip: str
    containers: tuple[Container, ...]
    virtual: bool = False  # run nothing even under a process runtime (other tenants' pods)

    @property
    def storage_limit_bytes(self) -> int:
        """The pod's ephemeral-storage limit: the sum of its containers' (upstream's
        ``PodLimits``); 0 when none sets one."""
        return sum(c.storage_limit_bytes for c in self.containers)


class Runtime(Protocol):
    name: str

    async def start(self, sandbox: Sandbox) -> None: ...

    async def probe(self, sandbox: Sandbox, container: Container) -> bool: ...

    def exited(self, sandbox: Sandbox) -> tuple[str, int] | None: ...

    async def stop(self, sandbox: Sandbox, grace_s: float) -> None: ...

    async def close(self) -> None: ...


class VirtualRuntime:
    name = "virtual"

    async def start(self, sandbox: Sandbox) -> None:
        return None

    async def probe(self, sandbox: Sandbox, container: Container) -> bool:
        return True

    def exited(self, sandbox: Sandbox) -> tuple[str, int] | None:
        return None

    async def stop(self, sandbox: Sandbox, grace_s: float) -> None:
        return None

    async def close(self) -> None:
        return None


# --- from a pod object ---------------------------------------------------------------
def _probe(spec: Mapping[str, Any] | None, ports: Mapping[str, int]) -> Probe | None:
    if not spec:
        return None
    path: str | None = None
    port = 0
    for kind in ("httpGet", "tcpSocket"):
        if kind in spec:
            raw = spec[kind].get("port", 0)
            port = ports.get(raw, 0) if isinstance(raw, str) else int(raw)
            path = spec[kind].get("path", "/") if kind == "httpGet" else None
    # exec probes (port 0): counted as passing, there is no exec into simulated containers
    return Probe(
        path,
        port,
        initial_delay_s=float(spec.get("initialDelaySeconds", 0)),
        period_s=float(spec.get("periodSeconds", 10)),
        timeout_s=float(spec.get("timeoutSeconds", 1)),
        failure_threshold=int(spec.get("failureThreshold", 3)),
    )


def _field_ref(pod: Mapping[str, Any], path: str, ip: str) -> str:
    if path == "status.podIP":
        return ip
    cur: Any = pod
    for part in path.split("."):
        cur = cur.get(part, {}) if isinstance(cur, Mapping) else {}
    return cur if isinstance(cur, str) else ""


def _expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion (``$$`` escapes), as the kubelet does for command/args."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            end = text.index(")", i)
            name = text[i + 2 : end]
            out.append(env.get(name, text[i : end + 1]))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _mounts(spec: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[Mount, ...]:
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    out = []
    for vm in container.get("volumeMounts") or []:
        vol = volumes.get(vm.get("name")) or {}
        ro = bool(vm.get("readOnly", False))
        if "hostPath" in vol:
            out.append(Mount(vm["name"], vm["mountPath"], vol["hostPath"].get("path", ""), ro))
        elif "emptyDir" in vol:
            out.append(Mount(vm["name"], vm["mountPath"], None, ro))
    return tuple(out)


def _limits(container: Mapping[str, Any]) -> tuple[int, int, int]:
    """(CPU millicores, memory bytes, ephemeral-storage bytes) of ``resources.limits``; 0
    where none is set. The API server validated the quantities at create."""
    limits = (container.get("resources") or {}).get("limits") or {}
    cpu = to_milli(limits["cpu"]) if limits.get("cpu") is not None else 0
    memory = to_units(limits["memory"]) if limits.get("memory") is not None else 0
    storage = limits.get("ephemeral-storage")
    disk = to_units(storage) if storage is not None else 0
    return max(cpu, 0), max(memory, 0), max(disk, 0)


def sandbox_from_pod(pod: Mapping[str, Any], ip: str, virtual: bool) -> Sandbox:
    meta, spec = pod["metadata"], pod["spec"]
    containers = []
    for c in spec.get("containers") or []:
        env: dict[str, str] = {}
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = _expand(str(e["value"]), env)
            elif "fieldRef" in (e.get("valueFrom") or {}):
                env[e["name"]] = _field_ref(
                    pod, e["valueFrom"]["fieldRef"].get("fieldPath", ""), ip
                )
        ports = {p["name"]: int(p["containerPort"]) for p in c.get("ports") or [] if p.get("name")}
        argv = tuple(
            _expand(str(a), env) for a in [*(c.get("command") or []), *(c.get("args") or [])]
        )
        probe = _probe(c.get("readinessProbe"), ports)
        mounts = _mounts(spec, c)
        cpu, memory, storage = _limits(c)
        containers.append(
            Container(
                c["name"],
                c.get("image", ""),
                argv,
                env,
                probe,
                mounts,
                c.get("workingDir", ""),
                cpu_limit_millis=cpu,
                memory_limit_bytes=memory,
                storage_limit_bytes=storage,
                security=security_of(spec, c),
            )
        )
    return Sandbox(
        meta["uid"], meta.get("namespace", ""), meta["name"], ip, tuple(containers), virtual
    )
