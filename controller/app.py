"""The controller process: client, cluster view, leader election, binder, garbage
collector, health, metrics.

Every replica runs the cluster view (warm caches, an exact capacity model); only the
leader binds. Losing the lease stops the binder at once (its reservations are dropped) and
the replica goes back to being a standby with its caches intact.

HTTP (``health_port``): ``/healthz`` — the event loop answers; ``/readyz`` — caches synced
and leadership known (we are the leader, or we have read who is); ``/metrics`` —
Prometheus text; ``POST /internal/v1/placements`` — the leader's placements for the
facade's pre-placed creates (controller/placement.py), its URL on the election Lease;
``POST /internal/v1/claims`` — the leader's claims of pool pods (controller/claims.py). The
leader also fills the announced pools (controller/pools.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from aiohttp import web

from controller.binder import Binder, BinderSettings
from controller.claims import ClaimService, ClaimSettings
from controller.collector import GarbageCollector, GCSettings
from controller.image_preparer import Preparer, PreparerSettings
from controller.leader import ElectionSettings, LeaderElector
from controller.metrics import ControllerMetrics
from controller.placement import PlacementService, PlacementSettings
from controller.placement_auth import CallerVerifier, PlacementAuthSettings
from controller.pools import PoolFiller, PoolSettings
from controller.replace import Replacer, ReplacerSettings
from controller.view import ClusterView, ViewSettings
from kube import ClientSettings, KubeClient
from kube.freezer import Freezer, FreezerSettings
from kube.placement import ANNOTATION_PLACEMENT_URL
from sandman.base.settings import LOG_LEVELS, part, setting
from scheduler import Scheduler, SchedulerSettings

__all__ = ["Controller", "ControllerSettings", "default_identity", "unusable_advertised_host"]


log = logging.getLogger("controller")


def default_identity() -> str:
    """Pod name (the hostname in Kubernetes) plus the pid: unique per process."""
    return f"{socket.gethostname()}_{os.getpid()}"


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    kubeconfig: str | None = setting(
        None, help="kubeconfig path; none: $KUBECONFIG, then in-cluster (kr8s resolves it)"
    )
    context: str | None = setting(None, help="kubeconfig context; none: its current one")
    client: ClientSettings = part(
        ClientSettings, help="the API client: its token bucket (binds, replacements, Events)"
    )
    view: ViewSettings = part(
        ViewSettings, help="the cluster view: which pods and Leases it watches"
    )
    binder: BinderSettings = part(BinderSettings, help="batching, planning and binding")
    scheduler: SchedulerSettings = part(
        SchedulerSettings, help="placement (docs/scheduler.md): the start-queue cap, scores"
    )
    gc: GCSettings = part(GCSettings, help="garbage collection (docs/controller.md §6)")
    replacer: ReplacerSettings = part(
        ReplacerSettings, help="replacements of pods the kubelet rejected before they ran"
    )
    prepare: PreparerSettings | None = part(
        PreparerSettings,
        help="image preparation decisions (controller/image_preparer.py); off: none are made",
        optional=True,
    )
    election: ElectionSettings | None = part(
        ElectionSettings,
        help="leader election on a Lease, with client-go's algorithm; off: this process "
        "always leads (one replica)",
        optional=True,
    )
    placement: PlacementSettings = part(
        PlacementSettings, help="the leader's placements for the facade's pre-placed creates"
    )
    placement_auth: PlacementAuthSettings | None = part(
        PlacementAuthSettings,
        help="who may ask for placements: the caller's bearer token, reviewed by the API "
        "server (TokenReview, cached), must be one of these identities; off: anyone who "
        "reaches the port",
        optional=True,
    )
    claims: ClaimSettings | None = part(
        ClaimSettings,
        help="the leader's claims of pool pods for the facade's creates (controller/claims.py; "
        "needs the SandboxClaim CRD); off: no claims are served, every create is cold",
        optional=True,
    )
    pools: PoolSettings | None = part(
        PoolSettings,
        help="the pool filler (controller/pools.py): announced sandboxes created ahead, paced by "
        "a token bucket of their own; off: announcements with sandboxes get none",
        optional=True,
    )
    health_host: str = setting(
        "127.0.0.1", help="address of /healthz, /readyz, /metrics (0.0.0.0 in a pod)"
    )
    health_port: int = setting(8080, help="port of /healthz, /readyz, /metrics; 0: any free port")
    advertise_url: str = setting(
        "",
        help="the URL facades reach the placement endpoint at, written on the election Lease "
        'while leading (in a pod: http://$(POD_IP):<health_port>); "": the health URL',
    )
    progress_interval_s: float = setting(
        10.0,
        help="between progress log lines: role, pending, queued, binding, unschedulable, "
        "retrying, bound",
    )
    freeze_after_sync: bool = setting(
        True,
        help="move everything alive after the initial lists out of the cyclic garbage "
        "collector's reach (gc.freeze), and the survivors of every full collection after them "
        "(kube/freezer.py): otherwise each full collection walks every cached object, "
        "~20% of the controller's CPU during a 12,000-pod burst",
    )
    freezer: FreezerSettings = part(FreezerSettings, help="when the frozen objects are thawed")
    log_level: str = setting("INFO", help="logging level", choices=LOG_LEVELS)

    def __post_init__(self) -> None:
        if self.election is not None and (problem := unusable_advertised_host(self)):
            raise ValueError(problem)
        if self.claims is not None and self.claims.send_within_s > self.placement.valid_for_s:
            raise ValueError(
                "claims.send_within_s must be <= placement.valid_for_s: a new leader's "
                "hand-over wait covers its predecessor's claim writes only then"
            )


def unusable_advertised_host(s: ControllerSettings) -> str:
    """Why the placement URL a leader would advertise cannot be reached ("" when it can).

    An unspecified address (``0.0.0.0``, ``::``) is a fine place to listen and no place to
    connect to: a facade reading it from the election Lease would fail every call and
    silently create every sandbox unbound (2 writes each). Refused at start, loudly."""
    host = urlsplit(s.advertise_url).hostname if s.advertise_url else s.health_host
    try:
        unspecified = not host or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return ""  # a name, or $(POD_IP) before the kubelet expanded it
    if not unspecified:
        return ""
    told = (
        f"advertise_url {s.advertise_url!r}"
        if s.advertise_url
        else (f"health_host {s.health_host!r} (no advertise_url)")
    )
    return (
        f"the leader would advertise {told}, an address no facade can connect to: set "
        "advertise_url to this pod's own address (http://$(POD_IP):<health_port>)"
    )


class Controller:
    def __init__(self, settings: ControllerSettings) -> None:
        self.settings = settings
        self.metrics = ControllerMetrics()
        self.health_url = ""
        self.client: KubeClient | None = None
        self.view: ClusterView | None = None
        self.binder: Binder | None = None
        self.elector: LeaderElector | None = None
        self.gc: GarbageCollector | None = None
        self.replacer: Replacer | None = None
        self.preparer: Preparer | None = None
        self.placement: PlacementService | None = None
        self.claims: ClaimService | None = None
        self.pools: PoolFiller | None = None
        self.freezer = Freezer(settings.freezer)
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Clean shutdown: release the lease, stop binding, return from :meth:`run`."""
        self._stopping.set()
        if self.elector is not None:
            self.elector.stop()

    def ready(self) -> bool:
        return not self.unready_reason()

    def unready_reason(self) -> str:
        """Why ``/readyz`` fails ("" when ready)."""
        if self.view is None or not self.view.synced():
            return "caches not synced"
        if refused := self.view.forbidden():
            return f"list/watch forbidden (403): {refused}"
        if self.elector is not None and not self.elector.known.is_set():
            return "leadership unknown"
        if self.binder is not None and self.binder.forbidden is not None:
            return f"binds forbidden (403): {self.binder.forbidden}"
        return ""

    async def run(self) -> None:
        s = self.settings
        async with await KubeClient.connect(
            s.client,
            kubeconfig=s.kubeconfig,
            context=s.context,
            observer=self.metrics.observe_request,
        ) as client:
            self.client = client
            self.view = ClusterView(client, Scheduler(s.scheduler), s.view)
            self.binder = Binder(client, self.view, s.binder, self.metrics)
            self.binder.attach()
            verifier = None
            if s.placement_auth is not None:
                verifier = CallerVerifier(client, s.placement_auth)
            self.placement = PlacementService(self.view, s.placement, verifier=verifier)
            self.placement.attach()
            if s.claims is not None:
                self.claims = ClaimService(
                    client, self.view, s.claims, verifier=verifier, registry=self.metrics.registry
                )
                self.claims.attach()
            if s.pools is not None:
                self.pools = PoolFiller(
                    client,
                    self.view,
                    self.placement,
                    s.pools,
                    self.metrics.registry,
                    book=self.claims.book if self.claims is not None else None,
                )
            self.gc = GarbageCollector(
                client,
                self.view,
                s.gc,
                self.metrics,
                claims=None if self.claims is None else self.claims.informer,
            )
            self.replacer = Replacer(client, self.view, s.replacer, self.metrics)
            self.replacer.attach()
            if s.prepare is not None:
                self.preparer = Preparer(
                    client,
                    self.view,
                    s.prepare,
                    s.scheduler.max_starting_per_node,
                    self.metrics.registry,
                )
            if s.election is not None:
                election = s.election
                if not election.identity:
                    election = replace(election, identity=default_identity())
                # Its own token bucket: renewals must not queue behind a burst of binds.
                # One request per attempt: the election's loop retries (controller/leader.py).
                self.elector = LeaderElector(client.with_rate_limit(0, 1, max_attempts=1), election)
            runner = await self._serve_health()
            if self.elector is not None:
                url = s.advertise_url or self.health_url
                self.elector.annotations[ANNOTATION_PLACEMENT_URL] = url
            try:
                async with asyncio.TaskGroup() as tg:
                    tasks = [
                        tg.create_task(self.view.run()),
                        tg.create_task(self._progress()),
                        tg.create_task(self._lead_loop()),
                    ]
                    if s.freeze_after_sync:
                        tg.create_task(self._freeze_after_sync())
                    if self.preparer is not None:
                        tasks.append(tg.create_task(self.preparer.run_informers()))
                    if self.claims is not None:
                        tasks.append(tg.create_task(self.claims.run_informer()))
                    if self.pools is not None:
                        tasks.append(tg.create_task(self.pools.run_informer()))
                    await self._stopping.wait()
                    await asyncio.wait(
                        [tasks[2]], timeout=s.election.renew_deadline_s if s.election else 1
                    )
                    for t in tasks:
                        t.cancel()
            finally:
                self.freezer.stop()
                await runner.cleanup()

    async def _lead(self) -> None:
        assert self.binder is not None and self.gc is not None and self.replacer is not None
        assert self.placement is not None
        self.metrics.leader.set(1)
        try:
            # Neither place nor bind on capacity a predecessor's placements may have taken.
            quiet = self.elector.predecessor_quiet_s if self.elector is not None else 0.0
            await self.placement.wait_out_predecessor(quiet)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.placement.serve())
                tg.create_task(self.binder.run())
                tg.create_task(self.gc.run())
                tg.create_task(self.replacer.run())
                if self.preparer is not None:
                    tg.create_task(self.preparer.lead())
                if self.claims is not None:
                    tg.create_task(self.claims.serve())
                if self.pools is not None:
                    tg.create_task(self.pools.lead())
        finally:
            self.metrics.leader.set(0)

    async def _lead_loop(self) -> None:
        if self.elector is None:
            await self._lead()
            return
        while not self._stopping.is_set():
            led = await self.elector.run(self._lead)
            if led and not self._stopping.is_set():
                log.warning("lost leadership; continuing as a standby")

    async def _freeze_after_sync(self) -> None:
        assert self.view is not None
        await self.view.wait_synced()
        frozen = self.freezer.start()
        log.info("caches synced: %d objects frozen out of the cyclic GC", frozen)

    async def _progress(self) -> None:
        while True:
            await asyncio.sleep(self.settings.progress_interval_s)
            assert self.binder is not None
            c = self.binder.counts()
            bound = self.metrics.binds.labels("bound")._value.get()
            role = "leader" if self.binder.leading else "standby"
            log.info(
                "%s: pending %d (queued %d, binding %d, unschedulable %d, retrying %d), bound %d",
                role,
                c["pending"],
                c["queued"],
                c["inflight"],
                c["parked"],
                c["retrying"],
                bound,
            )

    # --- health -------------------------------------------------------------------------
    async def _serve_health(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        if self.placement is not None:
            app.router.add_routes(self.placement.routes())
        if self.claims is not None:
            app.router.add_routes(self.claims.routes())
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.health_host, self.settings.health_port)
        await site.start()
        server = site._server
        assert server is not None
        host, port = server.sockets[0].getsockname()[:2]  # type: ignore[attr-defined]
        self.health_url = f"http://{host}:{port}"
        log.info("serving /healthz, /readyz and /metrics on %s", self.health_url)
        return runner

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _request: web.Request) -> web.Response:
        reason = self.unready_reason()
        if not reason:
            return web.Response(text="ok")
        return web.Response(status=503, text=reason)

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain")
