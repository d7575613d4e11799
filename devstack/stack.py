"""The embedded stack: simcluster, the controller and the facade as separate processes.

``sandman-dev up`` and the end-to-end tests start Sandman in its production process topology —
the same three programs an operator runs, talking over real HTTP — with simcluster standing
in for Kubernetes. Each process logs to a file in the work directory (tail it when something
looks wrong). A fresh tenant token is minted per start; the facade config holds only its
SHA-256, as in production.

Why processes and not one event loop: a controller or facade bug that blocks its loop, leaks
memory or mishandles a signal shows up here exactly as it would in a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from controller.leader import ElectionSettings
from devstack.crds import sandman_crds
from devstack.lifecycle import StartStop
from devstack.manifests import ManifestsError, ManifestsSettings, component_kubeconfigs
from devstack.manifests import apply_overlay as apply_manifests
from devstack.ports import free_listen_port
from devstack.sandbox_python import SANDBOX_EXECUTABLE, SandboxPython, stage_daemon_python
from kube import ClientSettings, KubeClient
from kube.errors import AlreadyExists
from kube.preparation_contract import AGENT_LEASE_NAMESPACE
from kube.resources import LEASES, Resource
from sandman.wire.facade import DEFAULT_CLASS

__all__ = ["Stack", "StackError", "StackSettings"]

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
RESOURCE_QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", namespaced=False)
#: Where the controller's election Lease and the node agents' Leases live.
SANDMAN_NAMESPACE = "sandman-system"
_LISTENING = re.compile(rb"facade listening on (http://\S+)")


class StackError(RuntimeError):
    """A part of the stack did not come up; the message names it and its log file."""


@dataclass(frozen=True, slots=True)
class StackSettings:
    workdir: Path
    profile: str = "dev"
    nodes: int | None = None
    #: Extra ``--set key=value`` overrides for the simcluster profile.
    simcluster_overrides: tuple[str, ...] = ()
    #: Tenants, each with its own token and namespace ``sandman-<name>``; the first is the
    #: one ``Stack.token`` belongs to.
    tenants: tuple[str, ...] = ("dev",)
    #: Bearer tokens for some tenants (the rest get fresh random ones).
    tenant_tokens: dict[str, str] = field(default_factory=dict)
    #: Images present on every node at start (what the node agent's pre-pull achieves).
    preloaded_images: tuple[str, ...] = ()
    #: More entries of some tenants' facade configuration (e.g. {"dev": {"max_tool_calls": 2}}:
    #: facade/tenancy.py), over the limits below.
    tenant_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    max_sandboxes: int = 1000
    create_rate_per_s: float = 200.0
    create_burst: int = 1000
    #: A ResourceQuota ``pods`` limit per tenant namespace (the hard backstop behind the
    #: facade's admission); None: no quota.
    quota_pods: dict[str, int] = field(default_factory=dict)
    #: Sandbox classes besides ``tiny`` (facade config entries, e.g. {"name": "huge", ...}).
    extra_classes: tuple[dict[str, Any], ...] = ()
    facade_host: str = "127.0.0.1"
    facade_port: int = 0
    controller_args: tuple[str, ...] = ()
    #: Controller processes: 1 always leads (``--no-election``); more elect a leader
    #: through the ``sandman-controller`` Lease, each with its process name as identity
    #: (``controller``, ``controller-2``, ...), the others warm standbys.
    controller_replicas: int = 1
    #: More leader-election flags when there are standbys (none: the controller's own
    #: defaults, a 3 s lease: controller/leader.py).
    election_args: tuple[str, ...] = ()
    facade_args: tuple[str, ...] = ()
    #: Facade processes (stateless replicas sharing one config); the first is ``Stack.url``.
    #: 0: no facade (a benchmark that creates pods itself).
    facade_replicas: int = 1
    start_timeout_s: float = 120.0
    #: One node agent per simulated node (``devstack.agents``, against each node's CRI
    #: socket); simcluster then serves CRI. The ImagePreparation CRD is installed either way.
    node_agents: bool = False
    #: More flags of the node agent's (``python -m daemon.node --help``), for every agent.
    node_agent_args: tuple[str, ...] = ()
    python: str = field(default_factory=lambda: sys.executable)
    #: The facade's ``delivery`` section (facade/podspec.py ``DaemonDelivery``); None: the
    #: daemon runs from this Python's packages, staged outside the checkout
    #: (``local-process``, simcluster's process runtime; devstack/sandbox_python.py). The
    #: ``cri`` runtime needs the bundle: ``{"mode": "host-path", "host_path": DIR}``.
    delivery: dict[str, Any] | None = None
    #: Run under the operator manifests (devstack/manifests.py): simcluster enforces RBAC,
    #: the ``simcluster`` overlay is applied, each component runs with a token of its own
    #: ServiceAccount. The overlay grants tenant ``dev`` only.
    manifests: bool = False


class Stack(StartStop):
    """``async with Stack(settings) as stack``: ``stack.url`` and ``stack.token`` to use it."""

    def __init__(
        self, settings: StackSettings, progress: Callable[[str], None] | None = None
    ) -> None:
        self.settings = settings
        self.say = progress or (lambda _m: None)
        # Hex, not urlsafe base64: a token that starts with "-" reads as a flag to a command
        # line given `--token TOKEN` (1 in 64 did: the CLI and fault-trainer tests were flaky).
        self.tokens = {
            name: settings.tenant_tokens.get(name) or secrets.token_hex(24)
            for name in settings.tenants
        }
        self.token = self.tokens[settings.tenants[0]]
        self.url = ""
        self.urls: list[str] = []
        self.controller_url = ""
        self.agents_metrics_url = ""
        self.controller_urls: list[str] = []
        self.kubeconfig = settings.workdir / "cluster" / "kubeconfig"
        self.processes: dict[str, asyncio.subprocess.Process] = {}
        #: Component (``controller``, ``facade``, ``node-agent``) -> its own kubeconfig,
        #: with ``settings.manifests``; empty otherwise (the shared service kubeconfigs).
        self.component_kubeconfigs: dict[str, Path] = {}
        self._log_offsets: dict[str, int] = {}
        #: The daemon's Python as the process runtime's sandboxes see it (staged in the work
        #: directory, devstack/sandbox_python.py), without ``settings.delivery``.
        self.sandbox_python: SandboxPython | None = None

    # --- start ----------------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        s.workdir.mkdir(parents=True, exist_ok=True)
        if s.manifests and s.tenants != ("dev",):
            raise StackError(f"--manifests grants tenant 'dev' only, not {s.tenants}")
        await self._start_simcluster()
        if s.manifests:
            await self._apply_manifests()
        await self._install_crd()
        for tenant in s.tenants:
            await self._ensure_namespace(f"sandman-{tenant}", s.quota_pods.get(tenant))
        self.write_facade_config()
        # Fixed ports, so a restarted controller or facade keeps its URL.
        self.controller_urls = [
            f"http://127.0.0.1:{free_listen_port()}" for _ in range(max(s.controller_replicas, 1))
        ]
        self.controller_url = self.controller_urls[0]
        self.urls = [
            f"http://{s.facade_host}:{(s.facade_port if i == 0 else 0) or free_listen_port()}"
            for i in range(s.facade_replicas)
        ]
        self.url = self.urls[0] if self.urls else ""
        for controller in self.controllers():
            await self._start_controller(controller)
        if s.node_agents:
            await self.start_agents()
        for replica in self.facades():
            await self._start_facade(replica)
        for controller, url in zip(self.controllers(), self.controller_urls, strict=True):
            await self._wait_http(controller, f"{url}/readyz")
        self.say(f"ready: facade at {self.url}" if self.url else "ready (no facade)")

    # --- one process at a time (failure tests, the fault benchmark) --------------------------
    async def restart(self, name: str) -> None:
        """Stop a controller (``controller``, ``controller-2``, ...) or a facade (``facade``,
        ``facade-2``, ...) with SIGTERM and start it again with the same settings and port."""
        await self._stop_one(name)
        await self.start_again(name)

    async def start_again(self, name: str) -> None:
        """Start a controller or facade that was stopped or killed (same settings, port and
        log, appended); it must not be running."""
        process = self.processes.get(name)
        if process is not None and process.returncode is None:
            raise StackError(f"{name} is still running (pid {process.pid})")
        if name in self.controllers():
            await self._start_controller(name)
            index = self.controllers().index(name)
            await self._wait_http(name, f"{self.controller_urls[index]}/readyz")
        elif name in self.facades():
            await self._start_facade(name)
        else:
            raise StackError(f"no controller or facade named {name!r}")

    def send_signal(self, name: str, sig: int) -> None:
        """``sig`` (e.g. SIGSTOP, SIGCONT) to one process of the stack, which stays in it."""
        process = self.processes.get(name)
        if process is None or process.returncode is not None:
            raise StackError(f"{name} is not running")
        process.send_signal(sig)

    async def kill(self, name: str) -> int:
        """SIGKILL one process (no clean shutdown: a crash) and reap it; its exit code.
        ``start_again`` brings a controller or facade back."""
        process = self.processes.get(name)
        if process is None or process.returncode is not None:
            raise StackError(f"{name} is not running")
        process.kill()
        code = await process.wait()
        del self.processes[name]
        return code

    async def leader(self) -> str:
        """The name of the controller holding the leader Lease ("" if none does)."""
        if self.settings.controller_replicas <= 1:
            return "controller" if "controller" in self.processes else ""
        async with await KubeClient.connect(
            ClientSettings(qps=0, burst=0), kubeconfig=str(self.kubeconfig)
        ) as client:
            election = ElectionSettings(identity="devstack")
            lease = await client.get(LEASES, election.name, election.namespace)
        return str((lease.get("spec") or {}).get("holderIdentity") or "")

    def controllers(self) -> list[str]:
        """The controller processes' names, ``controller`` first."""
        n = max(self.settings.controller_replicas, 1)
        return ["controller", *(f"controller-{i}" for i in range(2, n + 1))]

    def facades(self) -> list[str]:
        return ["facade", *(f"facade-{i + 1}" for i in range(1, len(self.urls)))][: len(self.urls)]

    def namespace(self, tenant: str | None = None) -> str:
        """The namespace of ``tenant`` (default: the first)."""
        return f"sandman-{tenant or self.settings.tenants[0]}"

    async def _start_simcluster(self) -> None:
        s = self.settings
        cluster_dir = s.workdir / "cluster"
        args = ["-m", "simcluster", "up", "--profile", s.profile, "--workdir", str(cluster_dir)]
        args += ["--status-every", "30"]
        if s.nodes is not None:
            args += ["--nodes", str(s.nodes)]
        overrides = list(s.simcluster_overrides)
        if s.delivery is None:
            stage = s.workdir / "sandbox-python"
            python = await asyncio.to_thread(stage_daemon_python, stage, s.python)
            self.sandbox_python = python
            overrides.append(python.profile_override())
        if s.node_agents:
            overrides.append("cri=true")
        if s.manifests:
            overrides.append("apiserver.authorization=rbac")
        if s.preloaded_images:
            overrides.append(f"nodes.preloaded_images=[{','.join(s.preloaded_images)}]")
        for override in overrides:
            args += ["--set", override]
        self.say(f"starting simcluster (profile {s.profile})")
        await self.spawn("simcluster", args)
        await self._wait_for(
            "simcluster", lambda: (cluster_dir / "kubeconfig-sandman").exists(), s.start_timeout_s
        )
        await self._wait_log("simcluster", b"export KUBECONFIG=")

    @property
    def service_kubeconfig(self) -> str:
        """The kubeconfig of Sandman's service account (its own API priority level)."""
        return str(self.settings.workdir / "cluster" / "kubeconfig-sandman")

    def kubeconfig_of(self, component: str) -> str:
        """The kubeconfig ``component`` runs with: its own under the manifests, else the
        shared one (the node agents': ``kubeconfig-node-agent``)."""
        if component in self.component_kubeconfigs:
            return str(self.component_kubeconfigs[component])
        if component == "node-agent":
            return str(self.settings.workdir / "cluster" / "kubeconfig-node-agent")
        return self.service_kubeconfig

    def facade_identity(self) -> str:
        """The user the facades' kubeconfig authenticates as (the name of its one user:
        simcluster and devstack/manifests.py write it so), whom the controllers' placement
        endpoint admits. Under the manifests, the facade's own ServiceAccount, the
        controller's default; otherwise the one identity all of Sandman's processes share
        (``kubeconfig-sandman``'s), so the endpoint still reviews every caller's token."""
        config = yaml.safe_load(Path(self.kubeconfig_of("facade")).read_text())
        return str(config["users"][0]["name"])

    async def _apply_manifests(self) -> None:
        self.say("applying manifests/overlays/simcluster (RBAC on)")
        settings = ManifestsSettings()
        try:
            await apply_manifests(self.kubeconfig, settings)
            self.component_kubeconfigs = await component_kubeconfigs(
                self.kubeconfig, self.settings.workdir, settings
            )
        except ManifestsError as e:
            raise StackError(f"the manifests: {e}") from e

    async def _start_controller(self, name: str) -> None:
        self.say(f"starting the {name}")
        url = self.controller_urls[self.controllers().index(name)]
        port = url.rsplit(":", 1)[1]
        election: tuple[str, ...] = ("--no-election",)
        if self.settings.controller_replicas > 1:
            election = ("--election-identity", name, *self.settings.election_args)
        await self.spawn(
            name,
            [
                "-m", "controller", "--kubeconfig", self.kubeconfig_of("controller"), *election,
                "--health-host", "127.0.0.1", "--health-port", port,
                "--placement-auth-users", self.facade_identity(),
                *self.settings.controller_args,
            ],
        )  # fmt: skip

    async def _start_facade(self, name: str) -> None:
        self.say(f"starting the {name}")
        url = self.urls[self.facades().index(name)]
        host, port = url.removeprefix("http://").rsplit(":", 1)
        placement: tuple[str, ...] = ()
        if self.settings.controller_replicas <= 1:  # no election, no Lease to find it by
            placement = ("--placement-url", self.controller_urls[0])
        await self.spawn(
            name,
            [
                "-m", "facade", "--config", str(self.settings.workdir / "facade.yaml"),
                "--kubeconfig", self.kubeconfig_of("facade"), "--host", host, "--port", port,
                *placement, *self.settings.facade_args,
            ],
        )  # fmt: skip
        await self._wait_log(name, _LISTENING)
        await self._wait_http(name, f"{url}/readyz")

    def write_facade_config(self) -> Path:
        """The facade's configuration file (its classes are what tests render pods of)."""
        s = self.settings
        secret = s.workdir / "facade-secret"
        secret.write_text(secrets.token_urlsafe(48))
        secret.chmod(0o600)
        document = {
            "secret_file": str(secret),
            "delivery": s.delivery or {"mode": "local-process", "python": [SANDBOX_EXECUTABLE]},
            "classes": [
                {"name": DEFAULT_CLASS, "cpu": "250m", "memory": "512Mi"},  # what creates get
                *s.extra_classes,
            ],
            "tenants": [
                {
                    "name": name,
                    "namespace": f"sandman-{name}",
                    "token_sha256": [hashlib.sha256(token.encode()).hexdigest()],
                    "max_sandboxes": s.max_sandboxes,
                    "create_rate_per_s": s.create_rate_per_s,
                    "create_burst": s.create_burst,
                    **s.tenant_config.get(name, {}),
                }
                for name, token in self.tokens.items()
            ],
        }
        path = s.workdir / "facade.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    async def start_agents(self) -> None:
        """The node agents, one core per simulated node in one process (devstack/agents.py)."""
        cluster = self.settings.workdir / "cluster"
        ready = self.settings.workdir / "agents.ready"
        ready.unlink(missing_ok=True)
        self.say("starting the node agents")
        args = [
            "-m", "devstack.agents", "--kubeconfig", self.kubeconfig_of("node-agent"),
            "--sockets", str(cluster / "cri-sockets.json"), "--namespace", AGENT_LEASE_NAMESPACE,
            "--state-dir", str(self.settings.workdir / "agents"), "--ready-file", str(ready),
            *self.settings.node_agent_args,
        ]  # fmt: skip
        await self.spawn("agents", args)
        await self._wait_for("agents", ready.exists, self.settings.start_timeout_s)
        self.agents_metrics_url = (
            f"http://127.0.0.1:{yaml.safe_load(ready.read_text())['port']}/metrics"
        )

    async def _install_crd(self) -> None:
        async with await KubeClient.connect(
            ClientSettings(qps=0, burst=0), kubeconfig=str(self.kubeconfig)
        ) as client:
            for crd in sandman_crds():
                with contextlib.suppress(AlreadyExists):
                    await client.create(CRDS, crd)
            for namespace in (SANDMAN_NAMESPACE, AGENT_LEASE_NAMESPACE):
                with contextlib.suppress(AlreadyExists):
                    await client.create(NAMESPACES, {"metadata": {"name": namespace}})

    async def _ensure_namespace(self, namespace: str, quota_pods: int | None) -> None:
        async with await KubeClient.connect(
            ClientSettings(qps=0, burst=0), kubeconfig=str(self.kubeconfig)
        ) as client:
            with contextlib.suppress(AlreadyExists):
                await client.create(NAMESPACES, {"metadata": {"name": namespace}})
            if quota_pods is not None:
                quota = {
                    "metadata": {"name": "sandman-backstop"},
                    "spec": {"hard": {"pods": str(quota_pods)}},
                }
                with contextlib.suppress(AlreadyExists):
                    await client.create(RESOURCE_QUOTAS, quota, namespace)

    async def spawn(self, name: str, args: list[str]) -> asyncio.subprocess.Process:
        """``python <args>`` as part of the stack: logged to ``<name>.log``, stopped with it."""
        log = self.log_path(name)
        # Appended, so a restarted process keeps its predecessor's log; waits read from here.
        self._log_offsets[name] = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            self.processes[name] = await asyncio.create_subprocess_exec(
                self.settings.python,
                *args,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,  # Ctrl-C in a terminal goes to us; we stop them in order
            )
        return self.processes[name]

    def log_path(self, name: str) -> Path:
        return self.settings.workdir / f"{name}.log"

    def _check_alive(self, name: str) -> None:
        process = self.processes[name]
        if process.returncode is not None:
            tail = self.log_path(name).read_bytes()[-2000:].decode(errors="replace")
            raise StackError(
                f"{name} exited with {process.returncode}; {self.log_path(name)} ends:\n{tail}"
            )

    async def _wait_for(self, name: str, check: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            self._check_alive(name)
            if time.monotonic() > deadline:
                raise StackError(f"{name} did not come up in {timeout_s:.0f} s")
            await asyncio.sleep(0.05)

    async def _wait_log(self, name: str, pattern: bytes | re.Pattern[bytes]) -> re.Match[bytes]:
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(re.escape(pattern))
        found: list[re.Match[bytes]] = []

        def check() -> bool:
            with self.log_path(name).open("rb") as log:
                log.seek(self._log_offsets.get(name, 0))
                match = regex.search(log.read())
            if match:
                found.append(match)
            return match is not None

        await self._wait_for(name, check, self.settings.start_timeout_s)
        return found[0]

    async def _wait_http(self, name: str, url: str) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while True:
                self._check_alive(name)
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(url) as response:
                        if response.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise StackError(f"{name} not ready at {url}; see {self.log_path(name)}")
                await asyncio.sleep(0.1)

    # --- stop -----------------------------------------------------------------------------
    async def stop(self) -> None:
        """Stop the facade, the controller, then simcluster (which stops its pod processes)."""
        core = (*self.controllers(), "simcluster")
        extra = [n for n in self.processes if n not in core and n not in self.facades()]
        for name in (*self.facades(), *extra, *core):
            await self._stop_one(name)

    async def _stop_one(self, name: str, timeout_s: float = 20.0) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        # A process stopped with SIGSTOP (a fault test) holds SIGTERM until it is continued.
        process.send_signal(signal.SIGCONT)
        try:
            async with asyncio.timeout(timeout_s):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()
