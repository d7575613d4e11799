"""Start Sandman in its production process topology on a simulated cluster.

Why separate processes: the reference burst is about the API server's budget and the
controller's and facade's own CPU; in one process they would share an event loop and a GIL
that production never shares. So simcluster (``python -m simcluster up``), the controller
(``python -m controller``) and the facade (``python -m controller.facade``) each run as
their own process, on loopback, as an operator would start them; only the benchmark's
recorder and request driver live in the benchmark process.

Output of each process goes to a log file in the work directory (a full pipe would stall
it); start-up is detected from simcluster's printed lines and from ``/readyz``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml

from controller.kube import AlreadyExists, ClientSettings, KubeClient, Resource

__all__ = ["Stack", "StackError", "StackSettings", "write_facade_config"]

SANDMAN_KUBECONFIG = "kubeconfig-sandman"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)


class StackError(RuntimeError):
    """A process of the stack did not start (its log file is named in the message)."""


@dataclass(frozen=True, slots=True)
class StackSettings:
    workdir: Path
    profile: str = "paper-burst"
    nodes: int | None = None  # None: the profile's count
    overrides: tuple[str, ...] = ()  # simcluster --set KEY=VALUE
    preload_image: str = "registry.bench/task:1"  # present on every node (node agent's job)
    controller_qps: float = 500.0
    controller_burst: int = 500
    controller_args: tuple[str, ...] = ()
    facade: bool = True
    tenant: str = "bench"
    namespace: str = "sandman-bench"
    token: str = "bench-token-0123456789abcdef"  # the tenant's bearer token (loopback only)
    python: str = sys.executable
    start_timeout_s: float = 120.0


@dataclass(slots=True)
class Stack:
    """``async with Stack(settings, say) as stack:`` — everything started is stopped."""

    settings: StackSettings
    say: Callable[[str], None]
    admin_kubeconfig: Path = Path()
    sandman_kubeconfig: Path = Path()
    facade_url: str = ""
    controller_url: str = ""
    procs: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)

    async def __aenter__(self) -> Stack:
        try:
            await self._start_simcluster()
            await self._ensure_namespace()
            await self._start_controller()
            if self.settings.facade:
                self.facade_url = await start_facade(self)
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # --- processes ----------------------------------------------------------------------
    async def spawn(self, name: str, *args: str) -> asyncio.subprocess.Process:
        log = (self.settings.workdir / f"{name}.log").open("wb")
        try:
            proc = await asyncio.create_subprocess_exec(
                self.settings.python,
                *args,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
            )
        finally:
            log.close()  # the child holds its own descriptor
        self.procs[name] = proc
        return proc

    async def stop(self) -> None:
        """SIGTERM in reverse start order (facade, controller, simcluster), then SIGKILL."""
        for name in reversed(list(self.procs)):
            proc = self.procs.pop(name)
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 20)
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await proc.wait()

    def log_path(self, name: str) -> Path:
        return self.settings.workdir / f"{name}.log"

    async def _start_simcluster(self) -> None:
        s = self.settings
        args = ["-m", "simcluster", "up", "--profile", s.profile, "--workdir", str(s.workdir)]
        args += ["--status-every", "3600"]
        if s.nodes is not None:
            args += ["--nodes", str(s.nodes)]
        overrides = list(s.overrides)
        if s.preload_image:
            overrides.append(f"nodes.preloaded_images=[{s.preload_image}]")
        for kv in overrides:
            args += ["--set", kv]
        self.say(f"starting simcluster: profile {s.profile}, nodes {s.nodes or 'as profiled'}")
        proc = await self.spawn("simcluster", *args)
        log = self.log_path("simcluster")
        deadline = time.monotonic() + s.start_timeout_s
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if "export KUBECONFIG=" in text:
                break
            if proc.returncode is not None:
                raise StackError(f"simcluster exited with {proc.returncode}; see {log}")
            await asyncio.sleep(0.1)
        else:
            raise StackError(f"simcluster not up after {s.start_timeout_s:.0f} s; see {log}")
        admin = re.search(r"\] kubeconfig: (\S+)", text)
        sandman = re.search(rf"kubeconfig \({SANDMAN_KUBECONFIG}\): (\S+)", text)
        if not admin or not sandman:
            raise StackError(f"no kubeconfig paths in {log}")
        self.admin_kubeconfig, self.sandman_kubeconfig = Path(admin[1]), Path(sandman[1])
        self.say(f"simcluster up; admin kubeconfig {self.admin_kubeconfig}")

    async def _ensure_namespace(self) -> None:
        """The tenant's namespace (an operator creates it with the tenant)."""
        settings = ClientSettings(qps=0, max_connections=2)
        async with await KubeClient.connect(settings, kubeconfig=str(self.admin_kubeconfig)) as c:
            with contextlib.suppress(AlreadyExists):
                await c.create(NAMESPACES, {"metadata": {"name": self.settings.namespace}})

    async def _start_controller(self) -> None:
        s = self.settings
        port = free_port()
        self.say(f"starting the controller (qps {s.controller_qps:g}, burst {s.controller_burst})")
        proc = await self.spawn(
            "controller",
            "-m",
            "controller",
            "--kubeconfig",
            str(self.sandman_kubeconfig),
            "--no-leader-elect",
            "--health-host",
            "127.0.0.1",
            "--health-port",
            str(port),
            "--qps",
            f"{s.controller_qps:g}",
            "--burst",
            str(s.controller_burst),
            "--progress-interval",
            "10",
            *s.controller_args,
        )
        self.controller_url = f"http://127.0.0.1:{port}"
        await wait_ready(self.controller_url, proc, self.log_path("controller"), s.start_timeout_s)
        self.say(f"controller ready at {self.controller_url}")


async def start_facade(stack: Stack) -> str:
    """The facade as its own process, configured for one benchmark tenant; returns its URL."""
    s = stack.settings
    config = write_facade_config(s.workdir / "facade.yaml", s)
    port = free_port()
    stack.say("starting the facade")
    proc = await stack.spawn(
        "facade",
        "-m",
        "controller.facade",
        "--kubeconfig",
        str(stack.sandman_kubeconfig),
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    )
    url = f"http://127.0.0.1:{port}"
    await wait_ready(url, proc, stack.log_path("facade"), s.start_timeout_s)
    stack.say(f"facade ready at {url}")
    return url


def write_facade_config(path: Path, s: StackSettings) -> Path:
    """One tenant whose limits never bind in a burst: the benchmark measures the cluster."""
    config = {
        "secret": hashlib.sha256(f"bench-secret:{s.workdir}".encode()).hexdigest(),
        "delivery": {"mode": "local-process", "python": [s.python]},
        "classes": [{"name": "tiny", "cpu": "250m", "memory": "512Mi"}],
        "tenants": [
            {
                "name": s.tenant,
                "namespace": s.namespace,
                "token_sha256": [hashlib.sha256(s.token.encode()).hexdigest()],
                "max_sandboxes": 20_000,
                "create_rate_per_s": 5_000,
                "create_burst": 12_000,
            }
        ],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


async def wait_ready(
    url: str, proc: asyncio.subprocess.Process, log: Path, timeout_s: float
) -> None:
    """Poll ``url/readyz`` until 200; fail early if the process exits."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                raise StackError(f"{log.stem} exited with {proc.returncode}; see {log}")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(
                    f"{url}/readyz", timeout=aiohttp.ClientTimeout(total=2)
                ) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.2)
    raise StackError(f"{log.stem} not ready after {timeout_s:.0f} s; see {log}")


def free_port() -> int:
    """A port free on loopback now (the child binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
