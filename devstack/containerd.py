"""A private containerd and image registry on loopback, for the ``cri`` runtime.

simcluster's ``cri`` kubelet runtime runs pods as real containers through containerd's CRI,
and the node agent pulls through the same containerd. Tests and benchmarks must not touch the
machine's own containerd (if any), so this module starts one of its own: root, state, socket
and config under one temporary directory, and a Debian ``docker-registry`` on 127.0.0.1
serving the images the tooling builds (:mod:`devstack.ociimage`) — no public registry is
reachable here, and none is needed.

What containerd 1.6 (Debian) needs on this kind of machine (measured, DESIGN.md §5):
``restrict_oom_score_adj = true``; plain HTTP to the local registry (a mirror entry with an
``http://`` endpoint); a sandbox ("pause") image that exists locally — the busybox image with
a ``sleep`` command serves, since a host-network sandbox needs nothing but a PID 1. The CRI
streaming server is bound to 127.0.0.1. No CNI configuration is written: every pod uses the
host's network, each daemon on its own 127.x.y.z address.

``stop()`` leaves nothing behind: it removes every pod sandbox still there (through CRI),
SIGTERMs containerd, then SIGKILLs any shim still
serving *this* containerd (found by its unique socket address, never by name), unmounts
what is still mounted under the directory and removes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from devstack.lifecycle import StartStop
from devstack.ports import free_listen_port

__all__ = ["ContainerdError", "ContainerdHost", "ContainerdSettings", "missing_tools"]

_APT_HINT = "install the Debian packages containerd, runc and docker-registry (`make system-deps`)"
TOOLS = ("containerd", "runc", "docker-registry")


class ContainerdError(RuntimeError):
    """containerd or the registry could not start; the message says why (and its log)."""


def missing_tools() -> list[str]:
    """The binaries this module needs that are not on PATH (Debian: /usr/sbin too)."""
    path = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    return [t for t in TOOLS if shutil.which(t, path=path) is None]


@dataclass(frozen=True, slots=True)
class ContainerdSettings:
    #: Parent of the temporary directory (short: unix socket paths are limited to 107 bytes).
    parent: str = "/tmp"
    start_timeout_s: float = 30.0
    #: The sandbox image's repository and tag in the local registry.
    pause_image: str = "sandman/pause:1"


def _config(root: Path, registry: str, pause: str) -> str:
    cri = '[plugins."io.containerd.grpc.v1.cri"]'
    return f"""version = 2
root = "{root}/root"
state = "{root}/state"
[grpc]
  address = "{root}/containerd.sock"
[ttrpc]
  address = "{root}/containerd.sock.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "{root}/opt"
{cri}
  sandbox_image = "{registry}/{pause}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_cdi = false
{cri[:-1]}.cni]
  bin_dir = "{root}/cni/bin"
  conf_dir = "{root}/cni/conf"
{cri[:-1]}.registry.mirrors."{registry}"]
  endpoint = ["http://{registry}"]
"""


def _registry_config(root: Path, port: int) -> str:
    return f"""version: 0.1
log: {{level: warn}}
storage:
  filesystem: {{rootdirectory: {root}/registry}}
  delete: {{enabled: true}}
http:
  addr: 127.0.0.1:{port}
"""


class ContainerdHost(StartStop):
    """``async with ContainerdHost() as host``: ``host.socket`` (CRI endpoint) and
    ``host.registry`` (``127.0.0.1:PORT``, plain HTTP) until the block ends."""

    def __init__(self, settings: ContainerdSettings | None = None) -> None:
        self.settings = settings or ContainerdSettings()
        self.root = Path(tempfile.mkdtemp(prefix="sm-ctd-", dir=self.settings.parent))
        self.socket = self.root / "containerd.sock"
        self.registry = ""
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def pause_image(self) -> str:
        return f"{self.registry}/{self.settings.pause_image}"

    def processes(self) -> list[subprocess.Popen[bytes]]:
        """containerd and the registry (for callers that account for their children)."""
        return list(self._procs.values())

    def log(self, name: str) -> str:
        try:
            return (self.root / f"{name}.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    async def start(self) -> None:
        if missing := missing_tools():
            raise ContainerdError(f"not installed: {', '.join(missing)}: {_APT_HINT}")
        port = free_listen_port("127.0.0.1")
        self.registry = f"127.0.0.1:{port}"
        (self.root / "registry.yml").write_text(_registry_config(self.root, port))
        self._spawn("registry", ["docker-registry", "serve", str(self.root / "registry.yml")])
        await self._wait("registry", lambda: _http_ok(port))
        config = self.root / "config.toml"
        config.write_text(_config(self.root, self.registry, self.settings.pause_image))
        self._spawn("containerd", ["containerd", "--config", str(config)])
        await self._wait("containerd", self.socket.exists)

    def _spawn(self, name: str, argv: list[str]) -> None:
        env = {**os.environ, "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"}
        with (self.root / f"{name}.log").open("ab") as log:
            self._procs[name] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )

    async def _wait(self, name: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        while not await asyncio.to_thread(ready):
            proc = self._procs[name]
            if proc.poll() is not None:
                raise ContainerdError(
                    f"{name} exited with {proc.returncode}; its log ends:\n{self.log(name)}"
                )
            if time.monotonic() > deadline:
                raise ContainerdError(f"{name} not ready after {self.settings.start_timeout_s} s")
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self._procs.get("containerd") is not None:
            await self._remove_all_pods()
        await asyncio.to_thread(self._stop_sync)

    async def _remove_all_pods(self) -> None:
        """Stop and remove every pod sandbox (and so every container) still on this
        containerd: a container outlives its shim if only the shim is killed."""
        with contextlib.suppress(grpc.aio.AioRpcError):
            async with grpc.aio.insecure_channel(f"unix:{self.socket}") as channel:
                rt = api_pb2_grpc.RuntimeServiceStub(channel)
                listed = await rt.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=10)
                for pod in listed.items:
                    await rt.StopPodSandbox(
                        api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod.id), timeout=30
                    )
                    await rt.RemovePodSandbox(
                        api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod.id), timeout=30
                    )

    def _stop_sync(self) -> None:
        for name in ("containerd", "registry"):
            proc = self._procs.pop(name, None)
            if proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        _kill_shims(str(self.socket))
        _unmount_under(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


def _http_ok(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _kill_shims(address: str) -> None:
    """SIGKILL the containerd shims started for ``address`` (they outlive containerd by
    design; a container's processes die with their shim's PID namespace init)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-address" in argv and address.encode() in argv and b"containerd-shim" in argv[0]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def _unmount_under(root: Path) -> None:
    """Lazily unmount what containerd left mounted under ``root`` (deepest first)."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    prefix = f"{root}/"
    targets = [
        line.split()[1]
        for line in lines
        if len(line.split()) > 1 and line.split()[1].startswith(prefix)
    ]
    for target in sorted(targets, key=len, reverse=True):
        subprocess.run(["umount", "-l", target], check=False, capture_output=True)
