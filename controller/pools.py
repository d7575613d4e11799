"""The pool filler: the leading controller creates announced sandboxes ahead of the step.

Why in the leader: a pool pod is placed like any pre-placed sandbox — the leader's placement
service plans it with the same scheduler and reserves its capacity (controller/placement.py)
— and created with ``spec.nodeName`` set, one API write per pod. Only the leader's capacity
model knows what its binds and the facade's placements have taken, so the filler asks it in
process, with no HTTP hop.

Each decision (at most every ``interval_s``, and soon after an announcement or a pool pod
changes) reads the live announcements with ``sandboxes`` (their own informer), the pool pods
(the view's bound-pod watch) and the claimed names (the claim book, controller/claim_book.py),
and carries out :func:`controller.pool_plan.plan`: the missing slots' pods are created
earliest deadline first, unclaimed pods of an ended announcement are deleted (nothing
lingers), and a failed pod or one whose node is lost or cordoned is deleted while unclaimed
and created again under its slot's name. A claimed pod is never the filler's.

**Polite.** Pool writes go through a token bucket of their own (``qps``/``burst``, with the
client's adaptive pacer halving it on a 429), one attempt per request, well below the
facade's and the binder's budgets: filling a pool for the next step must not delay this
step's creates. On the server side too: the pod writes are sent as the ``identity`` user
(``Impersonate-User``, the ``sandman-pools`` ServiceAccount), which the manifests' FlowSchema
puts in a priority level of its own that borrows nothing
(manifests/access/flowcontrol.yaml), so a pool fill cannot take the seats of the facade's
creates or the binds — it queues, or is answered 429, within its own level. A slot the
scheduler has no room for now is left for the next decision, never
created unbound.

**Never over-creates.** A slot's pod name is deterministic; a pod the filler created is
taken as present until the watch shows it (``recent_s``), and a create answered
AlreadyExists is a success — so a restart, a leader change or a watch gap mid-fill costs at
most one extra POST per slot, never a second pod (tests/controller/test_pools.py restarts
the controller mid-fill).

**Standing pools** (``spec.standing``: the tenant's configuration, written by the facade,
facade/standing.py) go through the same decision: never expiring, kept at ``min`` as claims
drain them, within ``max`` and the tenant's quota (controller/standing.py); a growing pool's
next slot is merge-patched into ``status.nextSlot`` *before* the slots below it are
created, so a restart never hands a claimed slot's name to a new pod.

**Visible.** The pool's counts (wanted, created, ready, claimed) are merge-patched into the
announcement's ``status.pool`` (the image preparer's patches never name that key), only when
they changed and at most every ``status_interval_s``; metrics ``sandman_pool_*``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec
from prometheus_client import CollectorRegistry

from controller.claim_book import ClaimBook, pod_ready
from controller.claims import node_ok
from controller.placement import PlacementService
from controller.pool_metrics import PoolMetrics, StandingMetrics
from controller.pool_plan import (
    Announcement,
    Create,
    Delete,
    PoolPod,
    PoolPodState,
    plan,
    wanted_names,
)
from controller.standing import (
    next_slot_of,
    record_slots,
    room,
    standing_of,
    standing_progress,
    with_next_slot,
)
from controller.view import ClusterView
from kube import PODS, KubeClient
from kube.cache import Obj
from kube.errors import AlreadyExists, KubeError, NotFound, TooManyRequests
from kube.informer import Handlers, Informer
from kube.placement import PlacementRequest
from kube.pool_contract import LABEL_POOL, pool_pod
from kube.preparation_contract import IMAGE_PREPARATIONS
from kube.times import parse_time
from sandman.base.settings import setting
from sandman.wire.image_preparation import PoolProgress, PreparationSpec, decode_spec

__all__ = ["PoolFiller", "PoolSettings"]

log = logging.getLogger(__name__)
Key = tuple[str, str]
_MERGE = "application/merge-patch+json"


@dataclass(frozen=True, slots=True)
class PoolSettings:
    qps: float = setting(
        20.0,
        help="pool pod creates and deletes per second: their own token bucket, kept well below "
        "the facade's creates and the binder's binds (docs/operator-guide.md, \"Pools\")",
    )
    burst: int = setting(20, help="the pool writes' bucket size")
    interval_s: float = setting(
        1.0,
        help="between fill decisions (one runs soon after an announcement or a pool pod changes)",
    )
    batch: int = setting(50, help="slots placed per placement decision (then created at once)")
    status_interval_s: float = setting(
        2.0, help="an announcement's pool counts are written at most this often, when changed"
    )
    identity: str = setting(
        "system:serviceaccount:sandman-system:sandman-pools",
        help="the pool pods' creates and deletes are sent as this user (Impersonate-User): "
        "the manifests' FlowSchema puts it in a priority level of its own, below the "
        'facade\'s creates and the binds; "": as the controller itself',
    )
    recent_s: float = setting(
        30.0, help="a pod the filler created counts as present this long before the watch shows it"
    )

    def __post_init__(self) -> None:
        if self.qps <= 0 or self.burst < 1 or self.batch < 1 or self.interval_s <= 0:
            raise ValueError("qps and interval_s must be > 0, burst and batch >= 1")


@dataclass(slots=True)
class _Tracked:
    spec: PreparationSpec | None
    announcement: Announcement
    seen_at: float
    filled: bool = False
    #: The object's generation when ``spec`` was read (a standing pool's spec changes with
    #: the tenant's configuration; an announcement's never does).
    generation: int = 0
    #: A standing pool's next slot as this process last wrote it.
    next_slot: int = 0


class PoolFiller:
    """``run_informer`` on every replica; ``lead`` while leading (after the predecessor's
    placements were waited out, controller/app.py)."""

    def __init__(
        self,
        client: KubeClient,
        view: ClusterView,
        placement: PlacementService,
        settings: PoolSettings,
        registry: CollectorRegistry,
        *,
        book: ClaimBook | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Its own bucket and pacer, one attempt: never in the binds' or the claims' way.
        self.client = client.with_rate_limit(settings.qps, settings.burst, max_attempts=1)
        #: The pod writes, as the pools identity (its own API Priority and Fairness level),
        #: through the same bucket; the status patches stay the controller's own.
        self.writer = (
            self.client.impersonating(settings.identity) if settings.identity else self.client
        )
        self.view = view
        self.placement = placement
        self.settings = settings
        self.book = book
        self.metrics = PoolMetrics(registry)
        self.standing_metrics = StandingMetrics(registry)
        self._clock = clock
        self.announcements = Informer(
            client,
            IMAGE_PREPARATIONS,
            namespace=view.settings.namespace,
            settings=view.settings.informer,
            name="pool-announcements",
        )
        self._dirty = asyncio.Event()
        #: (namespace, pod) -> (counted as present until, its announcement): created, not in
        #: the watch yet.
        self._recent: dict[tuple[str, str], tuple[float, str]] = {}
        self._spent: set[tuple[str, str]] = set()
        self._tracked: dict[tuple[str, str], _Tracked] = {}
        self._status_written: dict[tuple[str, str], tuple[float, PoolProgress]] = {}
        self.leading = False
        poke = Handlers(
            add=lambda _o: self._dirty.set(),
            update=lambda _o, _n: self._dirty.set(),
            delete=lambda _o: self._dirty.set(),
        )
        self.announcements.add_handler(poke)
        view.bound.add_handler(
            Handlers(
                add=self._pod_event,
                update=lambda _o, new: self._pod_event(new),
                delete=self._pod_event,
            )
        )

    def _pod_event(self, pod: Obj) -> None:
        if (pod.get("metadata") or {}).get("labels", {}).get(LABEL_POOL):
            self._dirty.set()

    async def run_informer(self) -> None:
        await self.announcements.run()

    async def lead(self) -> None:
        """Decide and write until cancelled (leadership lost)."""
        self.leading = True
        try:
            await self.view.wait_synced()
            await self.announcements.wait_synced()
            while True:
                self._dirty.clear()
                try:
                    await self.step()
                except Exception:
                    # A decision that fails (a template the scheduler cannot read, a bug)
                    # must not end the leadership of the binder and placements beside it.
                    log.exception("a pool fill decision failed; the next one retries")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.interval_s * 10):
                        await self._dirty.wait()
                await asyncio.sleep(self.settings.interval_s)
        finally:
            self.leading = False

    # --- one decision -------------------------------------------------------------------
    async def step(self) -> None:
        now = self._clock()
        announcements = self._announcements(now)
        pods, by_pool = self._pods(now)
        self._spend(announcements, pods)
        space = room(self.view, self._limits(announcements), self._recent)
        decided = plan(announcements, pods, self._spent, space)
        await self._delete(decided.deletes)
        recorded = await record_slots(self.client, decided.next_slots)
        self._recorded(decided.next_slots, recorded)
        creates = tuple(
            c
            for c in decided.creates[: self.settings.batch]
            if (c.namespace, c.announcement) not in decided.next_slots
            or (c.namespace, c.announcement) in recorded
        )
        await self._create(creates)
        self._observe(announcements, by_pool, decided.creates, now)
        self.standing_metrics.observe(
            [(a, self._tracked[(a.namespace, a.name)].spec) for a in announcements if a.live],
            pods,
            self._spent,
        )
        await self._write_statuses(by_pool)

    def _announcements(self, now: float) -> list[Announcement]:
        wall = dt.datetime.now(dt.UTC)
        out: list[Announcement] = []
        seen: set[tuple[str, str]] = set()
        for obj in self.announcements.cache:
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            raw = obj.get("spec") or {}
            if not raw.get("sandboxes"):
                continue
            seen.add(key)
            tracked = self._tracked.get(key)
            generation = int(meta.get("generation") or 0)
            if tracked is None or tracked.generation != generation:
                tracked = self._track(key, obj, now, tracked)
            if tracked.announcement.standing is not None:
                floor = max(tracked.next_slot, next_slot_of(obj))
                tracked.announcement = with_next_slot(tracked.announcement, floor)
            spec = tracked.spec
            live = (
                spec is not None
                and spec.pod_template is not None
                and not meta.get("deletionTimestamp")
                and (spec.expires_at is None or spec.expires_at > wall)
            )
            out.append(_with_live(tracked.announcement, live))
        for key in [k for k in self._tracked if k not in seen]:
            del self._tracked[key]
            self._status_written.pop(key, None)
        return out

    def _track(self, key: tuple[str, str], obj: Obj, now: float, old: _Tracked | None) -> _Tracked:
        """Read an announcement's spec (again, when a standing pool's changed)."""
        meta = obj.get("metadata") or {}
        spec: PreparationSpec | None
        try:
            spec = decode_spec(obj.get("spec") or {})
        except (msgspec.ValidationError, TypeError):
            spec = None
        created = parse_time(meta.get("creationTimestamp"))
        a = Announcement(
            namespace=key[0],
            name=key[1],
            images=tuple((i.image, i.count) for i in spec.images) if spec else (),
            deadline=spec.deadline.timestamp() if spec and spec.deadline else None,
            created=created.timestamp() if created else 0.0,
            standing=standing_of(spec, old.next_slot if old else 0),
        )
        generation, next_slot = int(meta.get("generation") or 0), old.next_slot if old else 0
        tracked = _Tracked(spec, a, old.seen_at if old else now, False, generation, next_slot)
        self._tracked[key] = tracked
        return tracked

    def _limits(self, announcements: list[Announcement]) -> dict[str, int]:
        """namespace -> its tenant's limit, for the namespaces with a live standing pool."""
        return {
            a.namespace: spec.standing.tenant_limit
            for a in announcements
            if a.live and (spec := self._tracked[(a.namespace, a.name)].spec) and spec.standing
        }

    def _recorded(self, next_slots: Mapping[Key, int], done: set[Key]) -> None:
        for key in done:
            tracked = self._tracked.get(key)
            if tracked is not None:
                tracked.next_slot = max(tracked.next_slot, next_slots[key])
                tracked.announcement = with_next_slot(tracked.announcement, tracked.next_slot)

    def _pods(self, now: float) -> tuple[list[PoolPod], dict[tuple[str, str], list[PoolPod]]]:
        """The pool pods of the watch, and those created since that it does not show yet
        (``recent_s``); by announcement too."""
        pods: list[PoolPod] = []
        by_pool: dict[tuple[str, str], list[PoolPod]] = {}
        nodes = self.view.nodes.cache
        for obj in self.view.bound.cache:
            meta = obj.get("metadata") or {}
            pool = (meta.get("labels") or {}).get(LABEL_POOL)
            if not pool:
                continue
            node = str((obj.get("spec") or {}).get("nodeName") or "")
            p = PoolPod(
                namespace=str(meta.get("namespace") or ""),
                name=str(meta.get("name") or ""),
                pool=str(pool),
                state=_state(obj),
                node_ok=node_ok(nodes.get(node)),
                deleting=bool(meta.get("deletionTimestamp")),
            )
            pods.append(p)
            by_pool.setdefault((p.namespace, p.pool), []).append(p)
            self._recent.pop((p.namespace, p.name), None)
        for (ns, name), (until, pool) in list(self._recent.items()):
            if now > until:
                del self._recent[(ns, name)]
            else:
                pods.append(PoolPod(ns, name, pool, "starting"))
        return pods, by_pool

    def _spend(self, announcements: list[Announcement], pods: list[PoolPod]) -> None:
        """Every slot name the claim book has as claimed joins the spent set for good (a
        claimed sandbox's slot is not refilled, even after its claim is gone)."""
        if self.book is None:
            return
        for p in pods:
            if self.book.is_claimed(p.namespace, p.name):
                self._spent.add((p.namespace, p.name))
        for a in announcements:
            for name in wanted_names(a):
                if self.book.is_claimed(a.namespace, name):
                    self._spent.add((a.namespace, name))

    # --- writes -------------------------------------------------------------------------
    async def _delete(self, deletes: tuple[Delete, ...]) -> None:
        async def one(d: Delete) -> None:
            try:
                await self.writer.delete(PODS, d.pod, d.namespace)
            except NotFound:
                pass
            except KubeError as e:
                log.info("deleting pool pod %s/%s failed: %s", d.namespace, d.pod, e)
                return
            self.metrics.deletes.labels(d.reason).inc()

        await asyncio.gather(*(one(d) for d in deletes))

    async def _create(self, creates: tuple[Create, ...]) -> None:
        """Place the slots (in process: the leader's placement service) and create the
        placed ones with ``spec.nodeName``; a slot without room waits for the next decision."""
        groups: dict[tuple[str, str, int], list[Create]] = {}
        for c in creates:
            groups.setdefault((c.namespace, c.announcement, c.image_index), []).append(c)
        sends = []
        for (ns, name, _i), members in groups.items():
            tracked = self._tracked.get((ns, name))
            if tracked is None or tracked.spec is None or tracked.spec.pod_template is None:
                continue
            template = tracked.spec.pod_template
            pods = [pool_pod(template, name, c.image_index, c.image, c.slot) for c in members]
            for pod in pods:
                pod["metadata"]["namespace"] = ns
            request = PlacementRequest(ns, [p["metadata"]["name"] for p in pods], pods[0])
            try:
                nodes = self.placement.place(request)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                log.warning("the pool template of %s/%s cannot be placed: %s", ns, name, e)
                continue
            for pod, node in zip(pods, nodes, strict=True):
                if node is None:
                    self.metrics.creates.labels("no_room").inc()
                    continue
                pod["spec"]["nodeName"] = node
                sends.append(self._send(ns, name, pod))
        await asyncio.gather(*sends)

    async def _send(self, ns: str, pool: str, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        try:
            await self.writer.request("POST", PODS.path(ns), body=pod, lean=True)
            outcome = "created"
        except AlreadyExists:
            outcome = "exists"  # a restart or a watch gap: the slot is there, a success
        except TooManyRequests as e:
            self.metrics.creates.labels("throttled").inc()
            log.info("pool create %s/%s throttled (%s); the next decision retries", ns, name, e)
            return
        except KubeError as e:
            self.metrics.creates.labels("error").inc()
            log.info("pool create %s/%s failed: %s", ns, name, e)
            return
        self.metrics.creates.labels(outcome).inc()
        # A created pod counts as present until the watch shows it. One that existed already
        # only briefly: it may be the slot's old pod on its way out (a replacement sent
        # before the watch showed the deletion), and the slot must be retried once it is gone.
        hold = self.settings.recent_s if outcome == "created" else 2 * self.settings.interval_s
        self._recent[(ns, name)] = (self._clock() + hold, pool)

    # --- progress -----------------------------------------------------------------------
    def _progress(self, a: Announcement, pods: list[PoolPod]) -> PoolProgress:
        if a.standing is not None:
            return standing_progress(a, pods, self._spent)
        wanted = wanted_names(a)
        mine = [p for p in pods if p.name in wanted and not p.deleting]
        claimed = sum(1 for n in wanted if (a.namespace, n) in self._spent)
        ready = sum(
            1
            for p in mine
            if p.state == "ready" and p.node_ok and (p.namespace, p.name) not in self._spent
        )
        return PoolProgress(wanted=len(wanted), created=len(mine), ready=ready, claimed=claimed)

    def _observe(
        self,
        announcements: list[Announcement],
        by_pool: dict[tuple[str, str], list[PoolPod]],
        pending: tuple[Create, ...],
        now: float,
    ) -> None:
        states = dict.fromkeys(("starting", "ready", "claimed", "unhealthy"), 0)
        for pods in by_pool.values():
            for p in pods:
                if (p.namespace, p.name) in self._spent:
                    states["claimed"] += 1
                elif p.state == "failed" or not p.node_ok:
                    states["unhealthy"] += 1
                else:
                    states[p.state] += 1
        for state, n in states.items():
            self.metrics.pods.labels(state).set(n)
        waiting = {(c.namespace, c.announcement) for c in pending}
        for a in announcements:
            tracked = self._tracked.get((a.namespace, a.name))
            if tracked is None or tracked.filled or not a.live:
                continue
            if (a.namespace, a.name) not in waiting:
                tracked.filled = True
                self.metrics.fill_seconds.observe(now - tracked.seen_at)

    async def _write_statuses(self, by_pool: dict[tuple[str, str], list[PoolPod]]) -> None:
        now = self._clock()
        writes = []
        for key, tracked in self._tracked.items():
            a = tracked.announcement
            progress = self._progress(a, by_pool.get(key, []))
            last = self._status_written.get(key)
            if last is not None and (
                last[1] == progress or now - last[0] < self.settings.status_interval_s
            ):
                if last[1] != progress:
                    self._dirty.set()
                continue
            self._status_written[key] = (now, progress)
            writes.append(self._patch_status(key, progress))
        await asyncio.gather(*writes)

    async def _patch_status(self, key: tuple[str, str], progress: PoolProgress) -> None:
        path = IMAGE_PREPARATIONS.path(key[0], key[1], "status")
        body = {"status": {"pool": msgspec.to_builtins(progress)}}
        try:
            await self.client.request("PATCH", path, body=body, content_type=_MERGE)
        except NotFound:
            pass
        except KubeError as e:
            self._status_written.pop(key, None)
            log.info("writing the pool status of %s/%s failed: %s", key[0], key[1], e)


def _with_live(a: Announcement, live: bool) -> Announcement:
    return a if a.live == live else dataclasses.replace(a, live=live)


def _state(pod: Obj) -> PoolPodState:
    if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
        return "failed"
    return "ready" if pod_ready(pod) else "starting"
