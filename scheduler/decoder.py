"""The edge: Kubernetes Node and Pod JSON objects in, typed models out.

Everything that knows field names of the Kubernetes API lives here, so the rest of the
package works on :mod:`scheduler.model` only. Conversions follow what Kubernetes itself
does, because the model must agree with the kubelet's admission check:

- a pod's request is ``max(sum(containers) + sidecars, max(init containers))`` plus
  ``spec.overhead`` (``k8s.io/component-helpers/resource.PodRequests``, including
  restartable init containers, "sidecars", which keep running next to the app);
- node capacity is ``status.allocatable`` (falling back to ``status.capacity``);
- image names are normalised like the container runtime does (``nginx`` is
  ``docker.io/library/nginx:latest``) so a pod's image matches ``node.status.images``.

Why a :class:`Decoder` object: decoding is on the hot path (every pod event, every pending
pod). A cluster uses few distinct request lists, tolerations and images, so the decoder
memoises them (bounded, per instance) and hands out shared immutable objects; identical
sandboxes then share one :class:`PodShape`, which makes grouping them into an equivalence
class an identity check.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

from scheduler.model import (
    NodeInfo,
    Pod,
    PodShape,
    Requirement,
    Resources,
    SelectorTerm,
    Taint,
    Toleration,
    holds_capacity,
)
from scheduler.quantity import QuantityParser

__all__ = [
    "ANNOTATION_GROUP",
    "ANNOTATION_GROUP_SIZE",
    "BoundPod",
    "Decoder",
    "node_from_json",
    "normalize_image",
    "pod_from_json",
    "pod_requests",
    "resources",
]

Json = Mapping[str, Any]
T = TypeVar("T")
#: What the capacity model needs from a pod event: uid, node, requests, counts, starting.
BoundPod = tuple[str, str | None, Resources, bool, bool]
_PRESSURE = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
_CORE = ("cpu", "memory", "ephemeral-storage", "pods")
_ZERO = Resources()
#: A pod's group (``<namespace>/<name>``) and the group's size: scheduler/gang.py. The same
#: strings as kube.contract's (the scheduler imports nothing of kube; a test holds them equal).
ANNOTATION_GROUP = "sandman.io/group"
ANNOTATION_GROUP_SIZE = "sandman.io/group-size"


def resources(quantities: Json | None, parser: QuantityParser) -> Resources:
    """A ResourceList (``{"cpu": "250m", "memory": "512Mi"}``) as a :class:`Resources`."""
    if not quantities:
        return _ZERO
    cpu = quantities.get("cpu")
    mem = quantities.get("memory")
    eph = quantities.get("ephemeral-storage")
    extended = tuple(sorted((k, parser.units(v)) for k, v in quantities.items() if k not in _CORE))
    return Resources(
        parser.millis(cpu) if cpu is not None else 0,
        parser.units(mem) if mem is not None else 0,
        parser.units(eph) if eph is not None else 0,
        extended,
    )


def pod_requests(spec: Json, decoder: Decoder | None = None) -> Resources:
    """Effective pod request, computed the way the scheduler and the kubelet do."""
    return (decoder or Decoder()).requests(spec)


def _pod_requests(spec: Json, resources_of: Callable[[Json | None], Resources]) -> Resources:
    containers = spec.get("containers") or []
    inits, overhead = spec.get("initContainers"), spec.get("overhead")
    if len(containers) == 1 and not inits and not overhead:  # the common case, fast
        return resources_of((containers[0].get("resources") or {}).get("requests"))
    total = _ZERO
    for container in containers:
        total = total + resources_of((container.get("resources") or {}).get("requests"))
    sidecars = init_peak = _ZERO
    for container in inits or ():
        req = resources_of((container.get("resources") or {}).get("requests"))
        if container.get("restartPolicy") == "Always":
            total = total + req
            sidecars = sidecars + req
            init_peak = init_peak.max(sidecars)
        else:
            init_peak = init_peak.max(req + sidecars)
    return total.max(init_peak) + resources_of(overhead)


def normalize_image(ref: str) -> str:
    """``nginx`` -> ``docker.io/library/nginx:latest``; digests and explicit tags are kept."""
    name, digest = ref.split("@", 1) if "@" in ref else (ref, "")
    first, _, rest = name.partition("/")
    if not rest:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if digest:
        return f"{name}@{digest}"
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else f"{name}:latest"


def _taints(items: Iterable[Json] | None) -> tuple[Taint, ...]:
    return tuple(
        Taint(t.get("key", ""), t.get("value", "") or "", t.get("effect", "")) for t in items or ()
    )


def _requirements(items: Iterable[Json] | None) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(r["key"], r["operator"], tuple(r.get("values") or ())) for r in items or ()
    )


def _affinity(spec: Json) -> tuple[SelectorTerm, ...] | None:
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    return tuple(
        SelectorTerm(_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
        for t in required.get("nodeSelectorTerms") or ()
    )


def _toleration(t: Json) -> Toleration:
    return Toleration(
        t.get("key", "") or "",
        t.get("operator", "Equal") or "Equal",
        t.get("value", "") or "",
        t.get("effect", "") or "",
    )


def _group_of(meta: Json) -> tuple[str | None, int]:
    """The pod's group and its size; a malformed size makes the pod ungrouped (placed on
    its own, never stuck waiting for members that cannot be counted)."""
    annotations = meta.get("annotations") or {}
    name = annotations.get(ANNOTATION_GROUP)
    if not name or not isinstance(name, str):
        return None, 0
    try:
        size = int(annotations.get(ANNOTATION_GROUP_SIZE, ""))
    except (TypeError, ValueError):
        return None, 0
    if size < 1:
        return None, 0
    return f"{meta.get('namespace', '') or ''}/{name}", size


def _stopped(status: Json) -> bool:
    statuses = list(status.get("containerStatuses") or ()) + list(
        status.get("initContainerStatuses") or ()
    )
    return bool(statuses) and all("terminated" in (s.get("state") or {}) for s in statuses)


def _toleration_key(items: Iterable[Json]) -> Hashable:
    return tuple((t.get("key"), t.get("operator"), t.get("value"), t.get("effect")) for t in items)


class Decoder:
    """Converts Kubernetes JSON to models, memoising the parts clusters repeat."""

    def __init__(self, parser: QuantityParser | None = None, cache_limit: int = 4096) -> None:
        self.parser = parser or QuantityParser()
        self._limit = cache_limit
        self._memo: dict[tuple[str, Hashable], Any] = {}
        # uid -> (metadata.generation, requests) of pods seen by bound(): a pod's requests
        # change only with its spec (an in-place resize bumps the generation), while a bound
        # pod sends several status updates, each of which used to recompute them. Pods
        # without a generation (API servers before 1.33) are computed every time.
        self._pod_requests: dict[str, tuple[object, Resources]] = {}

    def _cached(self, kind: str, key: Hashable, build: Callable[[], T]) -> T:
        slot = (kind, key)
        hit = self._memo.get(slot)
        if hit is None:
            if len(self._memo) >= self._limit:
                self._memo.clear()
            hit = self._memo[slot] = build()
        return hit

    def resources(self, quantities: Json | None) -> Resources:
        if not quantities:
            return _ZERO
        key = tuple(quantities.items())
        return self._cached("res", key, lambda: resources(quantities, self.parser))

    def requests(self, spec: Json) -> Resources:
        return _pod_requests(spec, self.resources)

    def node(self, obj: Json) -> NodeInfo:
        """A Node object as a :class:`NodeInfo`."""
        meta, spec, status = (
            obj.get("metadata") or {},
            obj.get("spec") or {},
            obj.get("status") or {},
        )
        alloc = status.get("allocatable") or status.get("capacity") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
        names = (n for img in status.get("images") or () for n in img.get("names") or ())
        return NodeInfo(
            name=meta["name"],
            allocatable=resources(alloc, self.parser),
            max_pods=self.parser.units(alloc["pods"]) if "pods" in alloc else 110,
            labels=dict(meta.get("labels") or {}),
            taints=_taints(spec.get("taints")),
            unschedulable=bool(spec.get("unschedulable")),
            ready=conditions.get("Ready"),
            pressure=frozenset(c for c in _PRESSURE if conditions.get(c) == "True"),
            images=frozenset(self.image(n) for n in names),
        )

    def image(self, ref: str) -> str:
        return self._cached("img", ref, lambda: normalize_image(ref))

    def shape(self, spec: Json) -> PodShape:
        """The pod's :class:`PodShape`, shared with every pod of identical shape."""
        containers = list(spec.get("initContainers") or ()) + list(spec.get("containers") or ())
        tolerations = spec.get("tolerations") or ()
        tols = self._cached(
            "tol", _toleration_key(tolerations), lambda: tuple(map(_toleration, tolerations))
        )
        shape = PodShape(
            requests=self.requests(spec),
            tolerations=tols,
            node_selector=tuple(sorted((spec.get("nodeSelector") or {}).items())),
            affinity=_affinity(spec) if spec.get("affinity") else None,
            images=tuple(sorted({self.image(c["image"]) for c in containers if c.get("image")})),
            priority=int(spec.get("priority") or 0),
        )
        return self._cached("shape", shape, lambda: shape)

    def pod(self, obj: Json) -> Pod:
        """A Pod object as a :class:`Pod` (uid falls back to namespace/name)."""
        meta, spec, status = (
            obj.get("metadata") or {},
            obj.get("spec") or {},
            obj.get("status") or {},
        )
        namespace, name = meta.get("namespace", "") or "", meta.get("name", "") or ""
        group, size = _group_of(meta)
        return Pod(
            uid=meta.get("uid") or f"{namespace}/{name}",
            shape=self.shape(spec),
            namespace=namespace,
            name=name,
            node_name=spec.get("nodeName") or None,
            phase=status.get("phase") or "Pending",
            deleting=meta.get("deletionTimestamp") is not None,
            stopped=_stopped(status),
            group=group,
            group_size=size,
        )

    def bound(self, obj: Json) -> BoundPod:
        """The capacity-relevant part of a pod event (no shape: the fast path for events)."""
        meta, spec, status = (
            obj.get("metadata") or {},
            obj.get("spec") or {},
            obj.get("status") or {},
        )
        uid = meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        node, phase = spec.get("nodeName") or None, status.get("phase") or "Pending"
        deleting = meta.get("deletionTimestamp") is not None
        counts = holds_capacity(node, phase, deleting, deleting and _stopped(status))
        if not counts:
            return uid, node, _ZERO, False, False
        starting = phase == "Pending" and not deleting
        generation = meta.get("generation")
        if generation is None:
            return uid, node, self.requests(spec), True, starting
        known = self._pod_requests.get(uid)
        if known is not None and known[0] == generation:
            return uid, node, known[1], True, starting
        req = self.requests(spec)
        self._pod_requests[uid] = (generation, req)
        return uid, node, req, True, starting

    def forget(self, uid: str) -> None:
        """Drop what :meth:`bound` remembers of a deleted pod."""
        self._pod_requests.pop(uid, None)


def node_from_json(obj: Json, decoder: Decoder | None = None) -> NodeInfo:
    """A Node object as a :class:`NodeInfo`."""
    return (decoder or Decoder()).node(obj)


def pod_from_json(obj: Json, decoder: Decoder | None = None) -> Pod:
    """A Pod object as a :class:`Pod`."""
    return (decoder or Decoder()).pod(obj)
