"""The ``cri`` runtime: each pod runs as a real container through containerd's CRI.

The process runtime proves the daemon works as a process; it does not prove that it works as
PID 1 of an unmodified image in a real container, with the bundle mounted read-only, started
by the same runtime a real kubelet uses. This runtime does: for each pod it calls
``runtime.v1.RuntimeService`` on a containerd socket as the kubelet does — ``RunPodSandbox``,
then per container ``ImageStatus``/``PullImage`` (only when the image is absent: what the
node agent pre-pulled through the same ImageService starts without a pull),
``CreateContainer`` and ``StartContainer``; ``StopContainer``, ``StopPodSandbox`` and
``RemovePodSandbox`` on delete.

Networking: every sandbox uses the host's network namespace (``NamespaceMode.NODE``), so no
CNI is configured and no bridge or private-range address exists; the pod IP the kubelet
hands out is a loopback address of its own (127.x.y.z) which the daemon binds through
``$(SANDMAN_POD_IP)``, as in the process runtime. Every packet stays on loopback.

Volumes: ``hostPath`` is a CRI bind mount (read-only if the mount says so: how the daemon
bundle reaches the container), ``emptyDir`` a per-pod host directory removed with the pod.
Security: a container's capabilities (drop/add), ``allowPrivilegeEscalation: false`` (as
``no_new_privs``) and the seccomp profile type (``RuntimeDefault``: containerd's default
profile) are passed to CRI as the kubelet passes them, so the sandbox daemon is proven to run
as PID 1 with the hardening facade/podspec.py renders; ``hostUsers: false`` is not (the
containerd 1.6 here has no user-namespace support) and the pods share the host's network.
Resource limits: a container's ``resources.limits`` become its CRI
``LinuxContainerResources`` (CPU as a CFS quota over a 100 ms period, memory as the memory
limit), which runc writes to the container's cgroup (``memory.limit_in_bytes`` on a cgroup v1
host like this one, ``memory.max`` on v2); requests stay the simulator's admission
accounting.

Disk: ``storage_used`` measures a pod's writable layers (CRI ``ContainerStats``) and
emptyDir directories, and the kubelet evicts a pod over its ephemeral-storage limit
(``storage.py``).
PIDs: every pod gets a cgroup of its own below the runtime's (``podcgroup.py``), with
``pids.max`` = ``pod_pids_limit`` (the kubelet's ``podPidsLimit``), passed as the sandbox's
``cgroup_parent``: runc puts the pod's containers below it, so a fork bomb stops at the
limit and the node's other pods still fork.

Nodes: one runtime serves every simulated node over the one containerd (a cluster of N
``cri`` nodes is N kubelets sharing it); each pod still gets its own loopback address from
its node's range, so the daemons never collide. One image store serves all of them: an image
the agent of one node pulled is present on every node (a real cluster has a store per node).

Readiness probes are the process runtime's (``probes.py``: HTTP GET or TCP connect to the
pod IP). Exits are noticed by one poller per runtime (``ListContainers`` filtered on
``EXITED`` every ``poll_interval_s``, then ``ContainerStatus`` for the exit code), so
``exited()`` stays a cheap synchronous lookup. Every sandbox carries the label
``simcluster.io/runtime`` with this runtime's instance id, so ``close()`` removes all of
them, also one whose start a shutdown cancelled mid-RPC.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from simcluster.kubelet.podcgroup import CGROUP_ROOT, CgroupError, PodCgroups
from simcluster.kubelet.probes import probe_container
from simcluster.kubelet.runtime import Container, RuntimeStartError, Sandbox
from simcluster.kubelet.storage import directory_bytes

__all__ = ["CriRuntime", "CriRuntimeSettings"]

OWNER_LABEL = "simcluster.io/runtime"
#: The host's network (no CNI; the pod IP is a loopback address); a PID namespace per
#: container, so the daemon is PID 1 as in a pod without shareProcessNamespace.
_NAMESPACES = api_pb2.NamespaceOption(network=api_pb2.NODE, pid=api_pb2.CONTAINER)
#: The kubelet's CFS period (100 ms).
_CFS_PERIOD_US = 100_000


@dataclass(frozen=True, slots=True)
class CriRuntimeSettings:
    socket: str  # containerd's CRI endpoint (a unix socket path)
    log_dir: Path  # container logs (CRI format) under <log_dir>/cri/<pod uid>/
    pod_dir: Path | None = None  # emptyDir volumes (default: <log_dir>/../pods)
    rpc_timeout_s: float = 30.0
    pull_timeout_s: float = 300.0
    poll_interval_s: float = 0.5
    #: ``pids.max`` of each pod's cgroup (the kubelet's ``podPidsLimit``, podcgroup.py);
    #: <= 0: unlimited.
    pod_pids_limit: int = 1024
    cgroup_root: Path = CGROUP_ROOT


@dataclass(slots=True)
class _Pod:
    sandbox_id: str
    containers: dict[str, str]  # container name -> CRI container id


class CriRuntime:
    name = "cri"

    def __init__(
        self, settings: CriRuntimeSettings, on_pull: Callable[[str], None] | None = None
    ) -> None:
        self.settings = settings
        self.instance = secrets.token_hex(4)
        self._on_pull = on_pull
        target = (
            settings.socket if settings.socket.startswith("unix:") else f"unix:{settings.socket}"
        )
        self._channel = grpc.aio.insecure_channel(target)
        self._rt = api_pb2_grpc.RuntimeServiceStub(self._channel)
        self._img = api_pb2_grpc.ImageServiceStub(self._channel)
        self._pod_dir = settings.pod_dir or settings.log_dir.parent / "pods"
        self._pods: dict[str, _Pod] = {}
        self.cgroups = PodCgroups(
            f"simcluster-{self.instance}", settings.pod_pids_limit, settings.cgroup_root
        )
        self._exits: dict[str, tuple[str, int]] = {}
        self._poller: asyncio.Task[None] | None = None
        #: Images this runtime pulled (a pod start that found its image absent), in order.
        self.pulled: list[str] = []

    # --- the Runtime interface ---------------------------------------------------------
    async def start(self, sandbox: Sandbox) -> None:
        if sandbox.virtual:
            return
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll_exits(), name="cri exit poller")
        self._exits.pop(sandbox.uid, None)
        config = self._sandbox_config(sandbox)
        try:
            config.linux.cgroup_parent = self.cgroups.create(sandbox.uid)
        except CgroupError as e:
            raise RuntimeStartError("CreatePodSandboxError", str(e)) from e
        try:
            resp = await self._rt.RunPodSandbox(
                api_pb2.RunPodSandboxRequest(config=config), timeout=self.settings.rpc_timeout_s
            )
        except grpc.aio.AioRpcError as e:
            raise RuntimeStartError("CreatePodSandboxError", _details(e)) from e
        pod = self._pods[sandbox.uid] = _Pod(resp.pod_sandbox_id, {})
        for c in sandbox.containers:
            await self._ensure_image(c, config)
            pod.containers[c.name] = await self._create_and_start(sandbox, c, pod, config)

    async def probe(self, sandbox: Sandbox, container: Container) -> bool:
        return await probe_container(sandbox, container)

    def exited(self, sandbox: Sandbox) -> tuple[str, int] | None:
        return self._exits.get(sandbox.uid)

    async def stop(self, sandbox: Sandbox, grace_s: float) -> None:
        pod = self._pods.pop(sandbox.uid, None)
        if pod is not None:
            await self._remove(pod, grace_s)
        self.cgroups.remove(sandbox.uid)
        shutil.rmtree(self._pod_dir / sandbox.uid, ignore_errors=True)
        shutil.rmtree(self._log_dir(sandbox), ignore_errors=True)

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        self._pods.clear()
        with contextlib.suppress(grpc.aio.AioRpcError):
            selector = api_pb2.PodSandboxFilter(label_selector={OWNER_LABEL: self.instance})
            listed = await self._rt.ListPodSandbox(
                api_pb2.ListPodSandboxRequest(filter=selector), timeout=self.settings.rpc_timeout_s
            )
            for item in listed.items:
                await self._remove(_Pod(item.id, {}), 0)
        self.cgroups.close()
        await self._channel.close()

    async def storage_used(self, sandbox: Sandbox) -> int | None:
        """The pod's local ephemeral storage (storage.py): its containers' writable layers
        (CRI ``ContainerStats``) and its emptyDir directories; None if CRI cannot say."""
        pod = self._pods.get(sandbox.uid)
        if pod is None:
            return None
        total = 0
        for cid in list(pod.containers.values()):
            try:
                stats = await self._rt.ContainerStats(
                    api_pb2.ContainerStatsRequest(container_id=cid),
                    timeout=self.settings.rpc_timeout_s,
                )
            except grpc.aio.AioRpcError:
                return None
            total += stats.stats.writable_layer.used_bytes.value
        return total + await asyncio.to_thread(directory_bytes, self._pod_dir / sandbox.uid)

    def read_log(self, namespace: str, pod: str, container: str) -> bytes:
        """The container's output without the CRI log prefix (``<time> <stream> <P|F> ``)."""
        out = []
        for path in sorted(self.settings.log_dir.glob(f"cri/*/{namespace}_{pod}/{container}.log")):
            for line in path.read_bytes().splitlines(keepends=True):
                parts = line.split(b" ", 3)
                out.append(parts[3] if len(parts) == 4 else line)
        return b"".join(out)

    # --- pieces --------------------------------------------------------------------------
    def _log_dir(self, sandbox: Sandbox) -> Path:
        return self.settings.log_dir / "cri" / sandbox.uid / f"{sandbox.namespace}_{sandbox.name}"

    def _sandbox_config(self, sandbox: Sandbox) -> api_pb2.PodSandboxConfig:
        log_dir = self._log_dir(sandbox)
        log_dir.mkdir(parents=True, exist_ok=True)
        return api_pb2.PodSandboxConfig(
            metadata=api_pb2.PodSandboxMetadata(
                name=sandbox.name, uid=sandbox.uid, namespace=sandbox.namespace
            ),
            log_directory=str(log_dir),
            labels={OWNER_LABEL: self.instance},
            linux=api_pb2.LinuxPodSandboxConfig(
                security_context=api_pb2.LinuxSandboxSecurityContext(namespace_options=_NAMESPACES)
            ),
        )

    async def _ensure_image(self, c: Container, config: api_pb2.PodSandboxConfig) -> None:
        spec = api_pb2.ImageSpec(image=c.image)
        try:
            status = await self._img.ImageStatus(
                api_pb2.ImageStatusRequest(image=spec), timeout=self.settings.rpc_timeout_s
            )
            if status.image.id:
                return
            self.pulled.append(c.image)
            if self._on_pull is not None:
                self._on_pull(c.image)
            await self._img.PullImage(
                api_pb2.PullImageRequest(image=spec, sandbox_config=config),
                timeout=self.settings.pull_timeout_s,
            )
        except grpc.aio.AioRpcError as e:
            raise RuntimeStartError("ErrImagePull", f"{c.image}: {_details(e)}") from e

    def _mounts(self, sandbox: Sandbox, c: Container) -> list[api_pb2.Mount]:
        return [
            api_pb2.Mount(
                container_path=m.target,
                host_path=m.host_path(self._pod_dir, sandbox.uid),
                readonly=m.read_only,
            )
            for m in c.mounts
        ]

    async def _create_and_start(
        self, sandbox: Sandbox, c: Container, pod: _Pod, config: api_pb2.PodSandboxConfig
    ) -> str:
        if not c.argv:
            raise RuntimeStartError(
                "CreateContainerError", f"container {c.name}: the cri runtime needs a command"
            )
        container = api_pb2.ContainerConfig(
            metadata=api_pb2.ContainerMetadata(name=c.name),
            image=api_pb2.ImageSpec(image=c.image),
            command=list(c.argv),
            working_dir=c.working_dir,
            envs=[api_pb2.KeyValue(key=k, value=v) for k, v in c.env.items()],
            mounts=self._mounts(sandbox, c),
            log_path=f"{c.name}.log",
            labels={OWNER_LABEL: self.instance},
            linux=api_pb2.LinuxContainerConfig(
                resources=_resources(c),
                security_context=_security(c),
            ),
        )
        request = api_pb2.CreateContainerRequest(
            pod_sandbox_id=pod.sandbox_id, config=container, sandbox_config=config
        )
        try:
            created = await self._rt.CreateContainer(request, timeout=self.settings.rpc_timeout_s)
        except grpc.aio.AioRpcError as e:
            raise RuntimeStartError("CreateContainerError", _details(e)) from e
        try:
            await self._rt.StartContainer(
                api_pb2.StartContainerRequest(container_id=created.container_id),
                timeout=self.settings.rpc_timeout_s,
            )
        except grpc.aio.AioRpcError as e:
            raise RuntimeStartError("StartError", _details(e)) from e
        return str(created.container_id)

    async def _remove(self, pod: _Pod, grace_s: float) -> None:
        timeout = self.settings.rpc_timeout_s + grace_s
        for cid in pod.containers.values():
            with contextlib.suppress(grpc.aio.AioRpcError):
                await self._rt.StopContainer(
                    api_pb2.StopContainerRequest(container_id=cid, timeout=int(grace_s)),
                    timeout=timeout,
                )
        sid = pod.sandbox_id
        with contextlib.suppress(grpc.aio.AioRpcError):
            await self._rt.StopPodSandbox(
                api_pb2.StopPodSandboxRequest(pod_sandbox_id=sid), timeout=timeout
            )
        with contextlib.suppress(grpc.aio.AioRpcError):
            await self._rt.RemovePodSandbox(
                api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sid), timeout=timeout
            )

    async def _poll_exits(self) -> None:
        exited = api_pb2.ContainerFilter(
            state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_EXITED),
            label_selector={OWNER_LABEL: self.instance},
        )
        while True:
            await asyncio.sleep(self.settings.poll_interval_s)
            with contextlib.suppress(grpc.aio.AioRpcError):
                listed = await self._rt.ListContainers(
                    api_pb2.ListContainersRequest(filter=exited),
                    timeout=self.settings.rpc_timeout_s,
                )
                await self._record_exits({c.id for c in listed.containers})

    async def _record_exits(self, ids: set[str]) -> None:
        for uid, pod in list(self._pods.items()):
            if uid in self._exits:
                continue
            for name, cid in pod.containers.items():
                if cid in ids:
                    status = await self._rt.ContainerStatus(
                        api_pb2.ContainerStatusRequest(container_id=cid),
                        timeout=self.settings.rpc_timeout_s,
                    )
                    self._exits[uid] = (name, int(status.status.exit_code))
                    break


def _security(c: Container) -> api_pb2.LinuxContainerSecurityContext:
    """The container's securityContext as the kubelet passes it: capabilities (containerd
    prefixes ``CAP_`` and reads ``ALL``), no_new_privs, the seccomp profile type."""
    s = c.security
    context = api_pb2.LinuxContainerSecurityContext(
        namespace_options=_NAMESPACES,
        no_new_privs=s.no_new_privs,
        capabilities=api_pb2.Capability(
            add_capabilities=list(s.add), drop_capabilities=list(s.drop)
        ),
    )
    if s.seccomp in ("RuntimeDefault", "Unconfined"):
        context.seccomp.CopyFrom(
            api_pb2.SecurityProfile(
                profile_type=api_pb2.SecurityProfile.ProfileType.Value(s.seccomp)
            )
        )
    return context


def _resources(c: Container) -> api_pb2.LinuxContainerResources | None:
    """The container's limits as the kubelet passes them (a CFS quota per 100 ms period for
    CPU, with a floor of 1 ms as upstream's; memory in bytes); None without limits."""
    if not c.cpu_limit_millis and not c.memory_limit_bytes:
        return None
    resources = api_pb2.LinuxContainerResources()
    if c.cpu_limit_millis:
        resources.cpu_period = _CFS_PERIOD_US
        resources.cpu_quota = max(c.cpu_limit_millis * _CFS_PERIOD_US // 1000, 1000)
    if c.memory_limit_bytes:
        resources.memory_limit_in_bytes = c.memory_limit_bytes
    return resources


def _details(e: grpc.aio.AioRpcError) -> str:
    code = e.code()
    return f"{code.name if code is not None else 'UNKNOWN'}: {e.details() or ''}"
