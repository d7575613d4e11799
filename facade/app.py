"""The facade process: watch caches per tenant namespace, the service, the HTTP server.

Stateless by construction: everything it knows comes from its informers (sandbox pods and
the controller's Events, per tenant namespace) and from its configuration, so replicas are
interchangeable and a restarted facade serves the same answers as soon as its caches have
synced (``/readyz``). It writes only pods (create/delete) and owner Leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from aiohttp import web

from kube import EVENTS, NODES, PODS, ClientSettings, KubeClient
from kube.contract import LABEL_SANDBOX
from kube.informer import Informer, InformerSettings
from kube.placement import PlacementClient, PlacementClientSettings
from sandman.wire.keepalive import FACADE_IDLE_S

from .config import FacadeConfig
from .handlers import FacadeHandlers
from .index import IndexSettings, SandboxIndex, pod_indexers
from .metrics import FacadeMetrics
from .prepare import PreparationService
from .proxy import DaemonProxy, ProxyLimits
from .service import SandboxService, ServiceSettings

__all__ = ["CREATION_MODES", "Facade", "FacadeSettings"]

CREATION_MODES = ("pre-placed", "binder")

log = logging.getLogger("facade")


@dataclass(frozen=True, slots=True)
class FacadeSettings:
    kubeconfig: str | None = None
    context: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000  # 0: any free port (see Facade.url)
    #: Largest JSON body of a control request (creates, batches); tool-call bodies stream
    #: to the daemon, which enforces its own caps.
    max_body_bytes: int = 1 << 20
    #: An idle keep-alive connection from a trainer is closed after this long (s). Clients
    #: must close theirs first (the SDK's pool keeps idle connections for less,
    #: sandman.wire.keepalive), or a request sent just as the facade closes it fails.
    keepalive_s: float = FACADE_IDLE_S
    #: At stop, requests still running after waits were ended (tool calls, creates) get this
    #: long (s) to finish before they are cancelled.
    shutdown_grace_s: float = 5.0
    #: More connections than the send window holds creates (ServiceSettings.
    #: preplaced_window, at most 200): a pre-placed create the window lets through never waits
    #: for a connection past its placement's second.
    client: ClientSettings = field(
        default_factory=lambda: ClientSettings(
            qps=1000.0, burst=2000, max_connections=256, user_agent="sandman-facade/0.1"
        )
    )
    informer: InformerSettings = field(default_factory=InformerSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    service: ServiceSettings = field(default_factory=ServiceSettings)
    proxy: ProxyLimits = field(default_factory=ProxyLimits)
    #: Component name on the controller's Events (binder and garbage collector).
    controller_component: str = "sandman-controller"
    #: "pre-placed": ask the leading controller where a batch goes and create the pods
    #: with spec.nodeName (one write each; unbound whenever that fails); "binder": create
    #: every pod unbound for the binder (create + bind), for clusters whose policy forbids
    #: nodeName on create or that need kube-scheduler's preemption (docs/facade.md).
    creation: str = "pre-placed"
    placement: PlacementClientSettings = field(default_factory=PlacementClientSettings)

    def __post_init__(self) -> None:
        if self.creation not in CREATION_MODES:
            raise ValueError(f"creation must be one of {CREATION_MODES}, not {self.creation!r}")


class Facade:
    """``await start()``, then serve until ``await stop()``."""

    def __init__(self, settings: FacadeSettings, config: FacadeConfig) -> None:
        self.settings = settings
        self.config = config
        self.metrics = FacadeMetrics()
        self.index = SandboxIndex(settings.index)
        self.proxy = DaemonProxy(settings.proxy)
        self.url = ""
        self.client: KubeClient | None = None
        self.informers: list[Informer] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self.placer: PlacementClient | None = None
        self.service: SandboxService | None = None

    def ready(self) -> bool:
        """Every watch cache synced and none refused (a 403 leaves it stale)."""
        return bool(self.informers) and all(
            i.synced.is_set() and i.forbidden is None for i in self.informers
        )

    async def start(self) -> None:
        s = self.settings
        self.client = await KubeClient.connect(s.client, kubeconfig=s.kubeconfig, context=s.context)
        await self.proxy.start()
        for namespace in sorted({t.namespace for t in self.config.tenants.tenants()}):
            self._watch(namespace)
        nodes = Informer(self.client, NODES, settings=s.informer, name="nodes")
        self.index.attach_nodes(nodes)
        self.informers.append(nodes)
        self._tasks.append(asyncio.create_task(nodes.run(), name="nodes"))
        if s.creation == "pre-placed":
            self.placer = PlacementClient(
                self.client,
                s.placement,
                record=self._record_placement,
                record_wait=lambda outcome: self.metrics.placement_waits.labels(outcome).inc(),
            )
        service = self.service = SandboxService(
            self.client,
            self.index,
            self.config.tenants,
            dict(self.config.classes),
            self.config.delivery,
            self.config.minter,
            self.metrics,
            s.service,
            self.placer,
        )
        handlers = FacadeHandlers(
            service, self.index, self.config.tenants, self.proxy, self.metrics, self.ready,
            PreparationService(self.client),
        )  # fmt: skip
        app = web.Application(client_max_size=s.max_body_bytes, middlewares=[handlers.observe])
        app.add_routes(handlers.routes())
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=s.keepalive_s,
            shutdown_timeout=s.shutdown_grace_s,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, s.host, s.port)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{s.host}:{port}"
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="facade-housekeeping"))

    def _record_placement(self, outcome: str, pods: int) -> None:
        if pods:
            self.metrics.placement_pods.labels(outcome).inc(pods)

    def _watch(self, namespace: str) -> None:
        assert self.client is not None
        pods = Informer(
            self.client,
            PODS,
            namespace=namespace,
            label_selector=LABEL_SANDBOX,
            indexers=pod_indexers(),
            settings=self.settings.informer,
            name=f"sandboxes/{namespace}",
        )
        events = Informer(
            self.client,
            EVENTS,
            namespace=namespace,
            field_selector=f"reportingComponent={self.settings.controller_component}",
            settings=self.settings.informer,
            name=f"events/{namespace}",
        )
        self.index.attach(namespace, pods, events)
        self.informers += [pods, events]
        for informer in (pods, events):
            self._tasks.append(asyncio.create_task(informer.run(), name=informer.name))

    async def _housekeeping(self) -> None:
        while True:
            await asyncio.sleep(5.0)
            self.index.expire()
            self.metrics.cached_pods.set(
                sum(len(i.cache) for i in self.informers if i.resource is PODS)
            )

    async def stop(self) -> None:
        """End parked waits (each answers 503 ``facade_stopping``), stop listening, give
        running requests ``shutdown_grace_s``, then stop the watches and the clients."""
        self.index.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.proxy.close()
        if self.placer is not None:
            await self.placer.close()
            self.placer = None
        if self.client is not None:
            await self.client.close()
            self.client = None
