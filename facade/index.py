"""The facade's only state: watch caches of sandbox pods and their Events, indexed for lookup.

Why caches and not API reads: a trainer that waits for 500 sandboxes to become Ready would
otherwise poll the API server 500 times per second; here every wait is a future resolved by
the watch event that makes it true, and "list my sandboxes" is a dict lookup. A restarted
facade relists and knows everything again (Kubernetes objects are the state).

Three details make the cache safe to answer from:

- **Read-your-writes.** A create's response can beat its watch event back to the facade; the
  created object is noted *provisionally* so an immediate get or wait finds it. Watch data
  always wins over a provisional entry.
- **Replacements.** A sandbox is a label, not a pod name: the controller may replace a pod
  rejected by kubelet admission (``<id>-r<n>``); the newest attempt speaks for the sandbox.
- **Claims.** A claimed pool sandbox's owner, labels and expiry are its SandboxClaim's, not
  its pod's (facade/claimed.py): the view joins the two, and an unclaimed pool pod is no
  one's sandbox (not shown).
- **Tombstones.** A sandbox whose last pod disappears without this facade releasing it was
  deleted by the garbage collector; for a while its id answers ``terminated`` with the
  collector's reason (from its ``SandboxDeleted`` Event) instead of a bare 404.

Waits end when the facade stops (:meth:`SandboxIndex.close`): a long-poll parked here must
not hold a stopping replica up for its remaining minutes; it gets :class:`WaitAborted`
(answered 503, and the trainer's retry reaches another replica).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec

from kube.cache import Obj
from kube.contract import LABEL_CLASS, LABEL_OWNER, LABEL_SANDBOX
from kube.informer import Handlers, Informer
from kube.pool_contract import LABEL_POOL
from sandman.base.settings import setting
from sandman.wire.facade import Sandbox, SandboxState

from .claimed import ClaimIndex
from .leases import lease_name
from .state import GC_REASONS, attempt_of, is_live, sandbox_from_pod

__all__ = ["IndexSettings", "SandboxIndex", "WaitAborted", "pod_indexers"]

SandboxKey = tuple[str, str]  # (namespace, sandbox id)
FINAL: frozenset[SandboxState] = frozenset({"failed", "terminated", "releasing"})


def _sandbox_values(pod: Obj) -> Iterable[str]:
    meta = pod["metadata"]
    sid = (meta.get("labels") or {}).get(LABEL_SANDBOX)
    return (f"{meta['namespace']}/{sid}",) if sid else ()


def _owner_values(pod: Obj) -> Iterable[str]:
    meta = pod["metadata"]
    owner = (meta.get("labels") or {}).get(LABEL_OWNER)
    return (f"{meta['namespace']}/{owner}",) if owner else ()


def _pool_values(pod: Obj) -> Iterable[str]:
    meta = pod["metadata"]
    pool = (meta.get("labels") or {}).get(LABEL_POOL)
    return (f"{meta['namespace']}/{pool}",) if pool else ()


def _pool_spec_values(pod: Obj) -> Iterable[str]:
    """A pool pod's (namespace, image, class): what a create of that image and class claims."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    if not labels.get(LABEL_POOL):
        return ()
    image = next(
        (c.get("image") for c in pod["spec"]["containers"] if c.get("name") == "sandbox"), ""
    )
    return (pool_spec_key(meta["namespace"], image or "", labels.get(LABEL_CLASS, "")),)


def pool_spec_key(namespace: str, image: str, sandbox_class: str) -> str:
    return f"{namespace}/{sandbox_class}/{image}"


def pod_indexers() -> dict[str, Callable[[Obj], Iterable[str]]]:
    return {
        "sandbox": _sandbox_values,
        "owner": _owner_values,
        "pool": _pool_values,
        "pool-spec": _pool_spec_values,
    }


class WaitAborted(Exception):
    """The index was closed (the facade is stopping) while a wait was parked on it."""


@dataclass(frozen=True, slots=True)
class IndexSettings:
    max_attempts: int = setting(
        3,
        help="replacements the controller makes before giving up (keep it the controller's "
        "--replacer-max-attempts, controller/replace.py)",
    )
    provisional_s: float = setting(
        30.0, help="how long a provisionally noted create waits for its watch event"
    )
    tombstones: int = setting(50_000, help="tombstones of deleted sandboxes kept (most recent)")
    tombstone_s: float = setting(900.0, help="...and for how long")
    unknown_grace_s: float = setting(
        5.0,
        help="a wait on an id this replica has not seen gives up after this long: long enough "
        "for another replica's create to reach our watch, short enough for a typo",
    )


class SandboxIndex:
    """Call :meth:`attach` with each tenant namespace's pod and event informers."""

    def __init__(
        self, settings: IndexSettings | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings or IndexSettings()
        self._clock = clock
        self._pods: dict[str, Informer] = {}  # namespace -> informer
        #: Creates noted before their watch event, per namespace (sandbox id -> pod, noted at):
        #: by namespace so that admission's live count is O(1) however many are waiting.
        self._provisional: dict[str, dict[str, tuple[Obj, float]]] = {}
        self._tombstones: OrderedDict[SandboxKey, tuple[Sandbox, float]] = OrderedDict()
        self._released: dict[SandboxKey, float] = {}
        self._unschedulable: dict[str, str] = {}  # pod uid -> message
        self._gc_reason: dict[str, str] = {}  # pod uid -> collector's reason
        self._uid_key: dict[str, SandboxKey] = {}  # cached or buried pod uid -> sandbox
        self._expired_leases: dict[tuple[str, str], float] = {}  # (ns, lease) -> seen at
        self._nodes: Informer | None = None
        self._lost_nodes: dict[str, float] = {}  # node name -> deletion seen at
        self._ready_uids: set[str] = set()
        self._live: dict[str, int] = {}  # namespace -> live pods
        self._waiters: dict[SandboxKey, list[asyncio.Event]] = {}
        self._closed = False
        #: The SandboxClaims of every tenant namespace (facade/claimed.py).
        self.claims = ClaimIndex(
            self._claims_changed, provisional_s=self.settings.provisional_s, clock=clock
        )

    def attach(self, namespace: str, pods: Informer, events: Informer) -> None:
        self._pods[namespace] = pods
        pods.add_handler(
            Handlers(add=self._pod_added, update=self._pod_updated, delete=self._pod_deleted)
        )
        events.add_handler(Handlers(add=self._event, update=lambda _o, n: self._event(n)))

    def attach_claims(self, claims: Informer) -> None:
        """A tenant namespace's SandboxClaims: whose the claimed pool pods are."""
        self.claims.attach(claims)

    def attach_nodes(self, nodes: Informer) -> None:
        """Nodes, to tell a sandbox lost with its node from one deleted for another reason
        (the pod garbage collector force-deletes the pods of a deleted node, no Event)."""
        self._nodes = nodes
        nodes.add_handler(Handlers(delete=self._node_deleted))

    # --- reads ----------------------------------------------------------------------------
    def pods(self, namespace: str, sid: str) -> list[Obj]:
        found = self._watched(namespace, sid)
        if not found:
            provisional = self._provisional.get(namespace, {}).get(sid)
            if provisional and self._clock() - provisional[1] < self.settings.provisional_s:
                return [provisional[0]]
        return found

    def _watched(self, namespace: str, sid: str) -> list[Obj]:
        """The sandbox's pods in the watch cache (no provisional entry)."""
        informer = self._pods.get(namespace)
        return informer.cache.by_index("sandbox", f"{namespace}/{sid}") if informer else []

    def current_pod(self, namespace: str, sid: str) -> Obj | None:
        """The newest attempt (the one that speaks for the sandbox)."""
        pods = self.pods(namespace, sid)
        return max(pods, key=attempt_of) if pods else None

    def get(self, namespace: str, sid: str) -> Sandbox | None:
        pod = self.current_pod(namespace, sid)
        if pod is not None and self._unclaimed(pod):
            return None  # a pool pod no claim names: nobody's sandbox
        if pod is not None:
            view = self._view(pod)
            if (namespace, sid) in self._released and view.state != "releasing":
                # Released through a facade; the watch has not shown the deletion yet.
                return msgspec.structs.replace(view, state="releasing", reason=None, message=None)
            return view
        tomb = self._tombstones.get((namespace, sid))
        if tomb and self._clock() - tomb[1] < self.settings.tombstone_s:
            return tomb[0]
        return None

    def live(self, namespace: str) -> int:
        return self._live.get(namespace, 0) + len(self._provisional.get(namespace, ()))

    def pool_pods(self, namespace: str, announcement: str) -> int:
        """The live pool pods of an announcement in the watch (claimed or not): those of its
        slots that count in :meth:`live` already (facade/announcements.py's quota)."""
        informer = self._pods.get(namespace)
        if informer is None:
            return 0
        pods = informer.cache.by_index("pool", f"{namespace}/{announcement}")
        return sum(1 for p in pods if is_live(p))

    def claimable(self, namespace: str, image: str, sandbox_class: str, up_to: int) -> int:
        """How many of ``up_to`` sandboxes of (image, class) the namespace's pool could hand
        over now: its Ready pool pods no claim names, counted up to ``up_to``. They count in
        :meth:`live` already, so admission does not count them again (facade/create.py)."""
        informer = self._pods.get(namespace)
        if informer is None or up_to <= 0:
            return 0
        found = 0
        for pod in informer.cache.by_index(
            "pool-spec", pool_spec_key(namespace, image, sandbox_class)
        ):
            if is_live(pod) and self._unclaimed(pod) and _ready(pod):
                found += 1
                if found == up_to:
                    break
        return found

    def sandbox_ids(self, namespace: str, owner: str | None = None) -> list[str]:
        informer = self._pods.get(namespace)
        if informer is None:
            return []
        cache = informer.cache
        if owner is not None:
            pods = cache.by_index("owner", f"{namespace}/{owner}")
            ids = {(p["metadata"].get("labels") or {}).get(LABEL_SANDBOX) for p in pods}
            ids |= set(self.claims.pods_of_owner(namespace, owner))
        else:
            ids = {v.split("/", 1)[1] for v in cache.index_values("sandbox")}
        ids |= set(self._provisional.get(namespace, ()))
        return sorted(i for i in ids if i)

    async def wait(
        self, namespace: str, sid: str, until: frozenset[SandboxState], timeout_s: float
    ) -> Sandbox | None:
        """The sandbox once its state is in ``until`` (or final), or as it is at the timeout.

        Raises ValueError for a timeout that is not a finite number >= 0 (a NaN deadline
        would never pass, and a NaN timer corrupts the event loop's timer heap), and
        WaitAborted once :meth:`close` is called.
        """
        if not math.isfinite(timeout_s) or timeout_s < 0:
            raise ValueError(f"a wait needs a finite timeout >= 0, not {timeout_s!r}")
        started = self._clock()
        deadline = started + timeout_s
        key = (namespace, sid)
        while True:
            if self._closed:
                raise WaitAborted(f"stopped while waiting for {namespace}/{sid}")
            current = self.get(namespace, sid)
            if current is not None and (current.state in until or current.state in FINAL):
                return current
            if current is None:
                deadline = min(deadline, started + self.settings.unknown_grace_s)
            remaining = deadline - self._clock()
            if remaining <= 0:
                return current
            event = asyncio.Event()
            self._waiters.setdefault(key, []).append(event)
            try:
                async with asyncio.timeout(remaining):
                    await event.wait()
            except TimeoutError:
                pass
            finally:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    if event in waiters:
                        waiters.remove(event)
                    if not waiters:
                        del self._waiters[key]

    def close(self) -> None:
        """End every wait now and refuse new ones (the facade is stopping)."""
        self._closed = True
        for events in self._waiters.values():
            for event in events:
                event.set()

    # --- writes by this facade ------------------------------------------------------------
    def note_created(self, pod: Obj) -> Sandbox:
        """Note a pod just created (or found created) so that the next read finds it before
        its watch event does, unless the watch has it already: the sandbox it is now (the
        newest attempt's, as :meth:`get` answers)."""
        meta = pod["metadata"]
        sid = (meta.get("labels") or {}).get(LABEL_SANDBOX, meta["name"])
        key = (meta["namespace"], sid)
        self._tombstones.pop(key, None)
        self._released.pop(key, None)
        self._wake(key)  # waiters read the sandbox again once this returns: as noted below
        watched = self._watched(*key)
        noted = self._provisional.setdefault(key[0], {})
        if not watched or key[1] in noted:
            noted[key[1]] = (pod, self._clock())
        current = max(watched or [pod], key=attempt_of)  # what get() reads now
        uid = current["metadata"].get("uid", "")
        # _view's reading, of the pods just looked up: the note goes one way (cache, state).
        return sandbox_from_pod(
            current,
            unschedulable=self._unschedulable.get(uid),
            was_ready=uid in self._ready_uids,
            max_attempts=self.settings.max_attempts,
        )

    def note_released(self, namespace: str, sid: str) -> None:
        self._released[(namespace, sid)] = self._clock()
        self._forget_provisional((namespace, sid))

    def expire(self) -> None:
        """Drop stale provisional entries, tombstones and release marks (call periodically)."""
        now = self._clock()
        for noted in self._provisional.values():
            for sid, (_, at) in list(noted.items()):
                if now - at >= self.settings.provisional_s:
                    del noted[sid]
        for key, at in list(self._released.items()):
            if now - at >= self.settings.tombstone_s:
                del self._released[key]
        while self._tombstones:
            key, (_, at) = next(iter(self._tombstones.items()))
            fresh = now - at < self.settings.tombstone_s
            if fresh and len(self._tombstones) <= self.settings.tombstones:
                break
            self._tombstones.popitem(last=False)
        buried = set(self._tombstones)
        for uid, key in list(self._uid_key.items()):
            if key not in buried and not self.pods(*key):
                del self._uid_key[uid]
        for lease, at in list(self._expired_leases.items()):
            if now - at >= self.settings.tombstone_s:
                del self._expired_leases[lease]
        for name, at in list(self._lost_nodes.items()):
            if now - at >= self.settings.tombstone_s:
                del self._lost_nodes[name]
        self.claims.expire()
        if len(self._gc_reason) > self.settings.tombstones:
            self._gc_reason.clear()  # Events for pods never seen: nothing waits for them

    # --- watch events ---------------------------------------------------------------------
    def _view(self, pod: Obj) -> Sandbox:
        uid = pod["metadata"].get("uid", "")
        view = sandbox_from_pod(
            pod,
            unschedulable=self._unschedulable.get(uid),
            was_ready=uid in self._ready_uids,
            max_attempts=self.settings.max_attempts,
        )
        if not _pooled(pod):
            return view
        claimed = self.claims.of_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
        if claimed is None:
            return view
        spec = claimed.spec
        return msgspec.structs.replace(
            view, owner=spec.owner or "", labels=dict(spec.labels), expires_at=spec.expires_at
        )

    def _unclaimed(self, pod: Obj) -> bool:
        meta = pod["metadata"]
        return _pooled(pod) and self.claims.of_pod(meta["namespace"], meta["name"]) is None

    def _claims_changed(self, namespace: str, pods: list[str]) -> None:
        for name in pods:
            self._wake((namespace, name))

    def _pod_added(self, pod: Obj) -> None:
        self._count(pod, +1)
        self._touch(pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        self._count(old, -1)
        self._count(new, +1)
        self._touch(new)

    def _pod_deleted(self, pod: Obj) -> None:
        self._count(pod, -1)
        meta = pod["metadata"]
        uid = meta.get("uid", "")
        key = _key(pod)
        if key is not None and not self.pods(*key):
            self._bury(key, pod)
        self._unschedulable.pop(uid, None)
        self._ready_uids.discard(uid)
        if key is not None:
            self._wake(key)

    def _bury(self, key: SandboxKey, pod: Obj) -> None:
        uid = pod["metadata"].get("uid", "")
        if self._unclaimed(pod):
            self._uid_key.pop(uid, None)
            return  # an unclaimed pool pod was nobody's sandbox: nothing to answer for it
        if key in self._released:
            self._uid_key.pop(uid, None)
            return  # released through a facade: a plain 404 from now on
        last = self._view(pod)
        if last.state in ("failed", "terminated"):
            tomb = msgspec.structs.replace(last, message=last.message or "the sandbox was deleted")
        else:
            # The collector's Event usually arrives after the delete: _event() fills it in.
            gc_reason = self._gc_reason.pop(uid, "")
            ns = key[0]
            if not gc_reason and (ns, lease_name(last.owner)) in self._expired_leases:
                gc_reason = "owner-expired"
            if not gc_reason and self._node_lost(last.node):
                gc_reason = "node-gone"
            reason = GC_REASONS.get(gc_reason, "deleted")
            tomb = msgspec.structs.replace(
                last,
                state="failed" if last.state == "pending" else "terminated",
                reason=reason,
                message=f"the sandbox was deleted ({reason})",
            )
        self._tombstones[key] = (tomb, self._clock())
        self._tombstones.move_to_end(key)

    def _touch(self, pod: Obj) -> None:
        key = _key(pod)
        if key is None:
            return
        self._uid_key[pod["metadata"].get("uid", "")] = key
        self._forget_provisional(key)
        if sandbox_from_pod(pod).state == "ready":
            self._ready_uids.add(pod["metadata"].get("uid", ""))
        self._wake(key)

    def _forget_provisional(self, key: SandboxKey) -> None:
        noted = self._provisional.get(key[0])
        if noted is not None:
            noted.pop(key[1], None)

    def _count(self, pod: Obj, delta: int) -> None:
        if is_live(pod):
            ns = pod["metadata"]["namespace"]
            self._live[ns] = self._live.get(ns, 0) + delta

    def _event(self, event: Obj) -> None:
        involved = event.get("involvedObject") or {}
        uid = involved.get("uid")
        if not uid:
            return
        if event.get("reason") == "FailedScheduling":
            self._unschedulable[uid] = str(event.get("message") or "")
            self._wake_pod(uid)
        elif event.get("reason") == "SandboxDeleted":
            # controller/collector.py writes "deleted by the sandbox garbage collector: <reason>".
            message = str(event.get("message") or "")
            gc_reason = message.rsplit(": ", 1)[-1].split(" ", 1)[0]
            if involved.get("kind") == "Lease":
                self._owner_expired(involved.get("namespace", ""), involved.get("name", ""))
                return
            key = self._uid_key.get(uid)
            tomb = self._tombstones.get(key) if key is not None else None
            if tomb is not None and tomb[0].reason == "deleted":
                reason = GC_REASONS.get(gc_reason, "deleted")
                sandbox = msgspec.structs.replace(
                    tomb[0], reason=reason, message=f"the sandbox was deleted ({reason})"
                )
                self._tombstones[key] = (sandbox, tomb[1])  # type: ignore[index]
            elif tomb is None:
                self._gc_reason[uid] = gc_reason

    def _node_lost(self, node: str | None) -> bool:
        if not node or self._nodes is None or not self._nodes.synced.is_set():
            return False
        return node in self._lost_nodes or self._nodes.cache.get(node) is None

    def _node_deleted(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        self._lost_nodes[name] = self._clock()
        self._retag(lambda _key, tomb: tomb.node == name, "node-gone")

    def _retag(self, match: Callable[[SandboxKey, Sandbox], bool], gc_reason: str) -> None:
        """Tombstones still without a reason that ``match`` picks get the collector's."""
        reason = GC_REASONS[gc_reason]
        for key, (tomb, at) in list(self._tombstones.items()):
            if tomb.reason == "deleted" and match(key, tomb):
                self._tombstones[key] = (
                    msgspec.structs.replace(
                        tomb, reason=reason, message=f"the sandbox was deleted ({reason})"
                    ),
                    at,
                )

    def _owner_expired(self, namespace: str, lease: str) -> None:
        """The collector deleted a whole owner (one deletecollection, one Event on its Lease)."""
        self._expired_leases[(namespace, lease)] = self._clock()
        self._retag(
            lambda key, tomb: key[0] == namespace and lease_name(tomb.owner) == lease,
            "owner-expired",
        )

    def _wake_pod(self, uid: str) -> None:
        key = self._uid_key.get(uid)
        if key is not None:
            self._wake(key)

    def _wake(self, key: SandboxKey) -> None:
        for event in self._waiters.get(key, ()):
            event.set()


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _pooled(pod: Obj) -> bool:
    return bool((pod["metadata"].get("labels") or {}).get(LABEL_POOL))


def _key(pod: Obj) -> SandboxKey | None:
    meta = pod["metadata"]
    sid = (meta.get("labels") or {}).get(LABEL_SANDBOX)
    return (meta["namespace"], sid) if sid else None
