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
from dataclasses import dataclass

from aiohttp import web

from kube import EVENTS, NODES, PODS, ClientSettings, KubeClient
from kube.contract import LABEL_SANDBOX
from kube.freezer import Freezer, FreezerSettings
from kube.informer import Informer, InformerSettings
from kube.placement import PlacementClient, PlacementClientSettings
from kube.pool_contract import SANDBOX_CLAIMS
from sandman.base.settings import LOG_LEVELS, fixed, part, setting
from sandman.wire.keepalive import FACADE_IDLE_S

from .announcements import PoolTemplates, PreparationService
from .audit import AuditLog, AuditSettings
from .config import FacadeConfig
from .fairness import LoginThrottleSettings
from .handlers import FacadeHandlers
from .index import IndexSettings, SandboxIndex, pod_indexers
from .metrics import FacadeMetrics
from .proxy import DaemonProxy, ProxyLimits
from .service import SandboxService, ServiceSettings
from .standing import StandingPools, StandingSettings
from .tls import ServerTls

__all__ = ["CREATION_MODES", "Facade", "FacadeSettings"]

CREATION_MODES = ("pre-placed", "binder")

log = logging.getLogger("facade")


@dataclass(frozen=True, slots=True)
class FacadeSettings:
    kubeconfig: str | None = setting(
        None, help="kubeconfig path; none: $KUBECONFIG, then in-cluster (kr8s resolves it)"
    )
    context: str | None = setting(None, help="kubeconfig context; none: its current one")
    host: str = setting("127.0.0.1", help="listen address (0.0.0.0 in a pod)")
    port: int = setting(8000, help="listen port; 0: any free port")
    tls_cert_file: str | None = setting(
        None,
        help="serve the API over TLS with this PEM certificate chain (with tls_key_file); "
        "re-read when the file changes (a rotated Secret); none: plain HTTP, for loopback or "
        'behind an ingress that terminates TLS (docs/operator-guide.md, "TLS")',
    )
    tls_key_file: str | None = setting(None, help="the PEM private key of tls_cert_file")
    metrics_port: int | None = setting(
        None,
        help="serve /metrics on this port of its own (0: any free port), and not on --port: "
        "a NetworkPolicy can then let only scrapers reach it (the production manifests do); "
        "none: /metrics on --port beside the API, unauthenticated (development)",
    )
    max_body_bytes: int = setting(
        1 << 20,
        help="largest JSON body of a control request (creates, batches); tool-call bodies "
        "stream to the daemon, which enforces its own caps",
    )
    keepalive_s: float = setting(
        FACADE_IDLE_S,
        help="an idle keep-alive connection from a trainer is closed after this; clients close "
        "theirs first (the SDK's pool keeps idle connections for less, sandman.wire.keepalive), "
        "or a request sent just as the facade closes it fails",
    )
    shutdown_grace_s: float = setting(
        5.0,
        help="at stop, requests still running after waits were ended (tool calls, creates) get "
        "this long to finish before they are cancelled",
    )
    client: ClientSettings = part(
        ClientSettings,
        help="the API client (creates, deletes); more connections than the send window holds "
        "creates, so a pre-placed create the window lets through never waits for one",
        default=ClientSettings(
            qps=1000.0, burst=2000, max_connections=256, user_agent="sandman-facade/0.1"
        ),
    )
    informer: InformerSettings = part(InformerSettings, help="the list-and-watch of every cache")
    index: IndexSettings = part(IndexSettings, help="the watch-cache index of sandboxes")
    service: ServiceSettings = part(ServiceSettings, help="creates and batches")
    proxy: ProxyLimits = part(ProxyLimits, help="the hop to each sandbox's daemon")
    audit: AuditSettings = part(AuditSettings, help="the audit log (facade/audit.py)")
    failed_logins: LoginThrottleSettings = part(
        LoginThrottleSettings, help="failed logins, per remote address (facade/fairness.py)"
    )
    controller_component: str = fixed(
        "sandman-controller",
        why="the controller's name on its Events (binder and garbage collector): a contract "
        "between the two processes, not an operator's choice",
    )
    creation: str = setting(
        "pre-placed",
        help="pre-placed: ask the leading controller where a batch goes and create the pods "
        "with spec.nodeName (one write each; unbound whenever that fails); binder: create "
        "every pod unbound for the binder (create + bind), for clusters whose policy forbids "
        "nodeName on create or that need kube-scheduler's preemption (docs/facade.md)",
        choices=CREATION_MODES,
    )
    placement: PlacementClientSettings = part(
        PlacementClientSettings, help="where the leading controller is, and how long to wait for it"
    )
    freeze_after_sync: bool = setting(
        True,
        help="once every watch cache has synced, move what is alive out of the cyclic garbage "
        "collector's reach (gc.freeze), and the survivors of every full collection after "
        "that (kube/freezer.py): otherwise each full collection walks every cached pod",
    )
    freezer: FreezerSettings = part(FreezerSettings, help="when the frozen objects are thawed")
    standing: StandingSettings = part(
        StandingSettings,
        help="the tenants' standing pools, applied as objects (facade/standing.py)",
    )
    log_level: str = setting("INFO", help="logging level", choices=LOG_LEVELS)

    def __post_init__(self) -> None:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
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
        self._metrics_runner: web.AppRunner | None = None
        #: Where /metrics is served (the API's listener unless ``metrics_port`` is set).
        self.metrics_url = ""
        self.placer: PlacementClient | None = None
        self.service: SandboxService | None = None
        self.freezer = Freezer(settings.freezer)
        self.audit = AuditLog(settings.audit)
        #: The API listener's certificate, when it serves TLS (``tls_cert_file``).
        self.tls: ServerTls | None = None
        #: The tenants' standing pools (facade/standing.py), applied in the background.
        self.standing: StandingPools | None = None

    def ready(self) -> bool:
        """Every watch cache synced and none refused (a 403 leaves it stale)."""
        return bool(self.informers) and all(
            i.synced.is_set() and i.forbidden is None for i in self.informers
        )

    async def start(self) -> None:
        s = self.settings
        self.client = await KubeClient.connect(s.client, kubeconfig=s.kubeconfig, context=s.context)
        await self.proxy.start()
        self.audit.start()
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
        pools = PoolTemplates(
            dict(self.config.classes), self.config.delivery, self.config.minter, self.index
        )
        self.standing = StandingPools(
            self.client, self.config.tenants.tenants(), self.config.classes,
            self.config.delivery, self.config.minter, s.standing,
            enabled=s.service.pooled is not None,
        )  # fmt: skip
        self._tasks.append(asyncio.create_task(self.standing.run(), name="facade-standing"))
        handlers = FacadeHandlers(
            service, self.index, self.config.tenants, self.proxy, self.metrics, self.ready,
            PreparationService(self.client, pools), s.failed_logins, self.audit,
        )  # fmt: skip
        app = web.Application(client_max_size=s.max_body_bytes, middlewares=[handlers.observe])
        app.add_routes(handlers.routes(metrics=s.metrics_port is None))
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=s.keepalive_s,
            shutdown_timeout=s.shutdown_grace_s,
        )
        await self._runner.setup()
        tls = None
        if s.tls_cert_file is not None and s.tls_key_file is not None:
            tls = self.tls = ServerTls(s.tls_cert_file, s.tls_key_file)
            self._tasks.append(asyncio.create_task(tls.watch(), name="facade-tls-reload"))
        site = web.TCPSite(self._runner, s.host, s.port, ssl_context=tls.context if tls else None)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"{'https' if tls else 'http'}://{s.host}:{port}"
        self.metrics_url = f"{self.url}/metrics"
        if s.metrics_port is not None:
            await self._serve_metrics(handlers, s.metrics_port)
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="facade-housekeeping"))
        if s.freeze_after_sync:
            self._tasks.append(
                asyncio.create_task(self._freeze_when_synced(), name="facade-freeze")
            )

    async def _serve_metrics(self, handlers: FacadeHandlers, port: int) -> None:
        """/metrics alone on a listener of its own (``--metrics-port``): not an API call,
        so no audit line per scrape."""
        app = web.Application()
        app.add_routes([web.get("/metrics", handlers.prometheus)])
        runner = self._metrics_runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, self.settings.host, port).start()
        self.metrics_url = f"http://{self.settings.host}:{runner.addresses[0][1]}/metrics"

    async def _freeze_when_synced(self) -> None:
        """Freeze once the first lists are in (kube/freezer.py): what the caches hold then
        is what every later full collection would walk again."""
        await asyncio.gather(*(i.synced.wait() for i in self.informers))
        frozen = self.freezer.start()
        log.info("caches synced: %d objects frozen out of the cyclic GC", frozen)

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
        watched = [pods, events]
        if self.settings.service.pooled is not None:
            # Whose the claimed pool pods are (facade/claimed.py).
            claims = Informer(
                self.client,
                SANDBOX_CLAIMS,
                namespace=namespace,
                settings=self.settings.informer,
                name=f"claims/{namespace}",
            )
            self.index.attach_claims(claims)
            watched.append(claims)
        self.informers += watched
        for informer in watched:
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
        self.freezer.stop()
        if self._metrics_runner is not None:
            await self._metrics_runner.cleanup()
            self._metrics_runner = None
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
        self.audit.stop()
        if self.service is not None and self.service.pooled is not None:
            await self.service.pooled.close()
        if self.placer is not None:
            await self.placer.close()
            self.placer = None
        if self.client is not None:
            await self.client.close()
            self.client = None
