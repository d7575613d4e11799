"""Preparation: the leading controller decides which nodes pull which image, ahead of the
burst, and reports each request's progress.

Inputs: ``ImagePreparation`` objects (any namespace: an operator's standing request in
Sandman's namespace, a trainer's announcement in its tenant namespace), read from an
informer; the node agents' Leases and the Nodes, from the cluster view. The decision is
:func:`scheduler.pull_decisions.decide` (pure; its rules are documented there and in
docs/node-agent.md). Outputs, written by the leader only:

- **the plan**: each eligible node's ``sandman.io/prepare`` annotation on its agent Lease,
  a merge patch of that one annotation, only when the node's plan changed, at most once per
  ``node_write_interval_s`` per node (changes in between wait for the next decision);
- **the progress**: each request's ``status`` subresource (nodes wanted/planned/ready per
  image, sandboxes that can start at once on ready nodes, the agents' failures, a phase),
  only when it changed, at most once per ``status_interval_s`` per request.

Decisions run when a request, an agent Lease or a Node changes, at most every
``decide_interval_s``, and every ``resync_s`` regardless (deadlines, expiry, agents that
stopped renewing). Every replica keeps the informers warm; a standby never writes.

A node's agent is alive while its Lease's spec keeps changing: judged, as owner Leases are,
by when *this* controller saw it change plus ``leaseDurationSeconds`` on its own clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from prometheus_client import CollectorRegistry, Counter, Histogram

from controller.view import ClusterView
from kube import KubeClient
from kube.cache import Obj, object_key
from kube.errors import KubeError, NotFound
from kube.informer import Handlers, Informer
from kube.preparation_contract import (
    ANNOTATION_FAILED,
    ANNOTATION_PREPARE,
    ANNOTATION_READY,
    IMAGE_PREPARATIONS,
    PREPARE_BUDGET,
    decode_failed,
    decode_images,
    encode_images,
)
from kube.resources import LEASES
from kube.times import parse_time
from sandman.base.settings import setting
from sandman.wire.image_preparation import (
    ImageFailure,
    ImageProgress,
    PreparationSpec,
    PreparationStatus,
    decode_spec,
)
from scheduler import normalize_image
from scheduler.pull_decisions import AgentNode, ImageDemand, PrepareSettings, decide, nodes_wanted

__all__ = ["PrepareMetrics", "Preparer", "PreparerSettings"]

log = logging.getLogger(__name__)
_MERGE = "application/merge-patch+json"
_MAX_FAILURES = 10


@dataclass(frozen=True, slots=True)
class PreparerSettings:
    namespace: str | None = setting(
        None, help="watch ImagePreparations in this namespace only; none: every namespace"
    )
    decide_interval_s: float = setting(
        2.0,
        help="decisions run when a request, an agent Lease or a Node changes, at most this often",
    )
    resync_s: float = setting(
        10.0, help="...and this often regardless (deadlines, expiry, agents that stopped renewing)"
    )
    node_write_interval_s: float = setting(
        5.0, help="a node's plan is written at most this often (changes wait for the next decision)"
    )
    status_interval_s: float = setting(
        2.0, help="a request's status is written at most this often, and only when it changed"
    )
    qps: float = setting(
        20.0,
        help="client-side rate of plan and status writes (their own bucket: never in the binds' "
        "way)",
    )
    burst: int = setting(40, help="the plan and status writes' bucket size")
    max_pulls_per_image: int = setting(16, help="nodes pulling one image at once, cluster-wide")
    max_images_per_node: int = setting(64, help="images planned on one node at most")
    spread_images_per_node: int = setting(
        16, help="spread an image over more nodes while they hold fewer planned images (0: off)"
    )


class PrepareMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "sandman_prepare_decisions",
            "Preparation decisions made by the leader.",
            registry=registry,
        )
        self.decide_seconds = Histogram(
            "sandman_prepare_decide_seconds",
            "CPU-bound time of one preparation decision.",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2),
            registry=registry,
        )
        self.writes = Counter(
            "sandman_prepare_writes",
            "Plan (Lease annotation) and status writes, by kind and outcome.",
            ["kind", "outcome"],
            registry=registry,
        )


@dataclass
class _Request:
    key: str
    namespace: str
    name: str
    generation: int
    spec: PreparationSpec | None
    error: str
    status: dict[str, Any]


class Preparer:
    def __init__(
        self,
        client: KubeClient,
        view: ClusterView,
        settings: PreparerSettings,
        max_starting_per_node: int | None,
        registry: CollectorRegistry,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client.with_rate_limit(settings.qps, settings.burst)
        self.view = view
        self.settings = settings
        self.decision = PrepareSettings(
            max_starting_per_node=max_starting_per_node or 5,
            max_pulls_per_image=settings.max_pulls_per_image,
            max_images_per_node=settings.max_images_per_node,
            spread_images_per_node=settings.spread_images_per_node,
        )
        self.metrics = PrepareMetrics(registry)
        self.requests = Informer(
            client, IMAGE_PREPARATIONS, namespace=settings.namespace, name="image-preparations"
        )
        self._clock = clock
        self._dirty = asyncio.Event()
        self._seen: dict[str, tuple[Any, float]] = {}  # agent Lease key -> (spec, observed)
        self._node_written: dict[str, float] = {}
        self._status_written: dict[str, tuple[float, bytes]] = {}
        self.leading = False
        self.plan: dict[str, frozenset[str]] = {}
        self._failures: dict[str, dict[str, tuple[str, str]]] = {}
        poke = Handlers(
            add=lambda _o: self._dirty.set(),
            update=lambda _o, _n: self._dirty.set(),
            delete=lambda _o: self._dirty.set(),
        )
        self.requests.add_handler(poke)
        view.nodes.add_handler(poke)
        view.agent_leases.add_handler(
            Handlers(
                add=self._observe, update=lambda _o, new: self._observe(new), delete=self._gone
            )
        )

    # --- agent liveness -----------------------------------------------------------------
    def _observe(self, lease: Obj) -> None:
        key, spec = object_key(lease), lease.get("spec") or {}
        seen = self._seen.get(key)
        if seen is None or seen[0] != spec:
            self._seen[key] = (spec, self._clock())
        self._dirty.set()

    def _gone(self, lease: Obj) -> None:
        self._seen.pop(object_key(lease), None)
        self._dirty.set()

    def _alive(self, lease: Obj, now: float) -> bool:
        seen = self._seen.get(object_key(lease))
        if seen is None:
            return False
        duration = float(seen[0].get("leaseDurationSeconds") or 0)
        return duration > 0 and seen[1] + duration > now

    # --- running ------------------------------------------------------------------------
    async def run_informers(self) -> None:
        """Every replica: keep the requests warm."""
        await self.requests.run()

    async def lead(self) -> None:
        """The leader: decide and write until cancelled."""
        self.leading = True
        try:
            await self.view.wait_synced()
            await self.requests.wait_synced()
            while True:
                self._dirty.clear()
                await self.step()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.resync_s):
                        await self._dirty.wait()
                await asyncio.sleep(self.settings.decide_interval_s)
        finally:
            self.leading = False

    async def step(self) -> None:
        """One decision and its writes."""
        now = self._clock()
        requests = self._requests()
        nodes, leases = self._nodes(now)
        demands = self._demands(requests)
        start = time.process_time()
        plan = decide(demands.values(), nodes.values(), self.decision)
        self.metrics.decide_seconds.observe(time.process_time() - start)
        self.metrics.decisions.inc()
        self.plan = plan
        await self._write_plans(plan, nodes, leases, now)
        await self._write_statuses(requests, nodes, plan, now)

    # --- inputs -------------------------------------------------------------------------
    def _requests(self) -> list[_Request]:
        out = []
        for obj in self.requests.cache:
            meta = obj.get("metadata") or {}
            spec, error = None, ""
            try:
                spec = decode_spec(obj.get("spec"))
            except (msgspec.ValidationError, TypeError) as e:
                error = str(e)
            out.append(
                _Request(
                    object_key(obj),
                    meta.get("namespace", ""),
                    meta.get("name", ""),
                    int(meta.get("generation") or 0),
                    spec,
                    error,
                    obj.get("status") or {},
                )
            )
        return out

    def _nodes(self, now: float) -> tuple[dict[str, AgentNode], dict[str, Obj]]:
        nodes: dict[str, AgentNode] = {}
        leases: dict[str, Obj] = {}
        for lease in self.view.agent_leases.cache:
            name = (lease.get("spec") or {}).get("holderIdentity")
            if not name:
                continue
            annotations = (lease.get("metadata") or {}).get("annotations") or {}
            leases[name] = lease
            failed = decode_failed(annotations.get(ANNOTATION_FAILED))
            self._failures[name] = failed
            nodes[name] = AgentNode(
                name,
                eligible=self._alive(lease, now) and self._schedulable(name),
                ready=decode_images(annotations.get(ANNOTATION_READY)),
                planned=decode_images(annotations.get(ANNOTATION_PREPARE)),
                failed=frozenset(failed),
            )
        return nodes, leases

    def _schedulable(self, node: str) -> bool:
        obj = self.view.nodes.cache.get(node)
        if obj is None or (obj.get("spec") or {}).get("unschedulable"):
            return False
        conditions = (obj.get("status") or {}).get("conditions") or ()
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            return False
        try:
            return self.view.scheduler.free(node).pods > 0
        except KeyError:
            return False

    def _demands(self, requests: list[_Request]) -> dict[str, ImageDemand]:
        now = dt.datetime.now(dt.UTC)
        demands: dict[str, ImageDemand] = {}
        for r in requests:
            spec = r.spec
            if spec is None or (spec.expires_at is not None and spec.expires_at <= now):
                continue
            deadline = spec.deadline.timestamp() if spec.deadline else None
            for item in spec.images:
                image = normalize_image(item.image)
                old = demands.get(image)
                if old is None:
                    demands[image] = ImageDemand(image, item.count, deadline)
                    continue
                first = (
                    old.deadline if deadline is None else min(old.deadline or deadline, deadline)
                )
                demands[image] = ImageDemand(image, old.count + item.count, first)
        return demands

    # --- outputs ------------------------------------------------------------------------
    async def _write_plans(
        self,
        plan: dict[str, frozenset[str]],
        nodes: dict[str, AgentNode],
        leases: dict[str, Obj],
        now: float,
    ) -> None:
        writes = []
        for name, images in plan.items():
            if images == nodes[name].planned:
                continue
            if now - self._node_written.get(name, -1e18) < self.settings.node_write_interval_s:
                self._dirty.set()  # come back for it
                continue
            self._node_written[name] = now
            text, _left = encode_images(images, PREPARE_BUDGET, images)
            writes.append(self._patch_plan(leases[name], text))
        await asyncio.gather(*writes)

    async def _patch_plan(self, lease: Obj, text: str) -> None:
        meta = lease["metadata"]
        body = {"metadata": {"annotations": {ANNOTATION_PREPARE: text}}}
        try:
            await self.client.patch(LEASES, meta["name"], body, meta["namespace"])
            self.metrics.writes.labels("plan", "ok").inc()
        except KubeError as e:
            self.metrics.writes.labels("plan", "error").inc()
            log.info("writing the plan of %s failed: %s", meta["name"], e)

    async def _write_statuses(
        self,
        requests: list[_Request],
        nodes: dict[str, AgentNode],
        plan: dict[str, frozenset[str]],
        now: float,
    ) -> None:
        index = _index(nodes, plan, self._failures)
        eligible = sum(1 for n in nodes.values() if n.eligible)
        own = _tenant_demands(requests)
        writes = []
        for r in requests:
            status = self._status(r, own, index, eligible)
            encoded = msgspec.json.encode(status)
            last = self._status_written.get(r.key)
            if last is not None and last[1] == encoded:
                continue
            if last is not None and now - last[0] < self.settings.status_interval_s:
                self._dirty.set()
                continue
            self._status_written[r.key] = (now, encoded)
            status.updated_at = dt.datetime.now(dt.UTC)
            writes.append(self._patch_status(r, msgspec.to_builtins(status)))
        await asyncio.gather(*writes)
        live = {r.key for r in requests}
        for key in [k for k in self._status_written if k not in live]:
            del self._status_written[key]

    def _status(
        self,
        r: _Request,
        own: dict[tuple[str, str], int],
        index: dict[str, tuple[int, int, list[ImageFailure]]],
        eligible: int,
    ) -> PreparationStatus:
        """The announcement's progress, from what its tenant announced only: the nodes its
        own sandboxes need (not every tenant's demand for the image), and planned and ready
        nodes counted up to what its own count could have been given — a tenant must not
        read from its status how many sandboxes of an image other tenants announced
        (docs/operator-guide.md, "Fair sharing")."""
        status = PreparationStatus(observed_generation=r.generation)
        if r.spec is None:
            status.phase, status.reason, status.message = "Invalid", "InvalidSpec", r.error
            return status
        expires = r.spec.expires_at
        if expires is not None and expires <= dt.datetime.now(dt.UTC):
            status.phase, status.reason = "Expired", "Expired"
            return status
        cap = self.decision.max_starting_per_node
        all_ready, any_planned = True, False
        for item in r.spec.images:
            image = normalize_image(item.image)
            total = own.get((r.namespace, image), item.count)
            wanted = nodes_wanted(total, eligible, self.decision)
            planned, ready, failures = index.get(image, (0, 0, []))
            # Up to what this tenant's own count could have been given: the minimum, or one
            # node per sandbox where the plan spreads (rule 7, scheduler/pull_decisions.py).
            spread = self.decision.spread_images_per_node > 0
            ceiling = max(wanted, min(total, eligible)) if spread else wanted
            planned, ready = min(planned, ceiling), min(ready, ceiling)
            status.images.append(
                ImageProgress(
                    image=item.image,
                    count=item.count,
                    nodes_wanted=wanted,
                    nodes_planned=planned,
                    nodes_ready=ready,
                    sandboxes_ready=min(item.count, ready * cap),
                    failures=failures[:_MAX_FAILURES],
                )
            )
            all_ready &= wanted > 0 and ready >= wanted
            any_planned |= planned > 0
        if all_ready:
            status.phase = "Ready"
            prior = r.status.get("readyAt")
            status.ready_at = parse_time(prior) or dt.datetime.now(dt.UTC).replace(microsecond=0)
        elif any_planned:
            status.phase = "Preparing"
        elif eligible == 0:
            status.reason, status.message = "NoAgents", "no node agent is alive to prepare images"
        return status

    async def _patch_status(self, r: _Request, status: dict[str, Any]) -> None:
        path = IMAGE_PREPARATIONS.path(r.namespace, r.name, "status")
        try:
            await self.client.request("PATCH", path, body={"status": status}, content_type=_MERGE)
            self.metrics.writes.labels("status", "ok").inc()
        except NotFound:
            pass  # deleted meanwhile
        except KubeError as e:
            self.metrics.writes.labels("status", "error").inc()
            self._status_written.pop(r.key, None)
            log.info("writing the status of %s failed: %s", r.key, e)


def _tenant_demands(requests: list[_Request]) -> dict[tuple[str, str], int]:
    """(namespace, image) -> the sandboxes of the image the namespace's live requests
    expect: what one tenant's status is computed from."""
    now = dt.datetime.now(dt.UTC)
    own: dict[tuple[str, str], int] = {}
    for r in requests:
        spec = r.spec
        if spec is None or (spec.expires_at is not None and spec.expires_at <= now):
            continue
        for item in spec.images:
            key = (r.namespace, normalize_image(item.image))
            own[key] = own.get(key, 0) + item.count
    return own


def _index(
    nodes: dict[str, AgentNode],
    plan: dict[str, frozenset[str]],
    details: dict[str, dict[str, tuple[str, str]]],
) -> dict[str, tuple[int, int, list[ImageFailure]]]:
    """image -> (nodes planned, eligible nodes ready, failures on planned nodes)."""
    planned: dict[str, int] = {}
    ready: dict[str, int] = {}
    failures: dict[str, list[ImageFailure]] = {}
    for images in plan.values():
        for image in images:
            planned[image] = planned.get(image, 0) + 1
    for n in nodes.values():
        if not n.eligible:
            continue
        for image in n.ready:
            ready[image] = ready.get(image, 0) + 1
        for image in sorted(n.failed & plan.get(n.name, frozenset())):
            reason, message = details.get(n.name, {}).get(image, ("ErrImagePull", ""))
            failure = ImageFailure(node=n.name, reason=reason, message=message)
            failures.setdefault(image, []).append(failure)
    keys = set(planned) | set(ready)
    return {k: (planned.get(k, 0), ready.get(k, 0), failures.get(k, [])) for k in keys}
