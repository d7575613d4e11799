"""The garbage collector: an owner's deletion reaches its dependents, by propagation policy.

Objects whose ``metadata.ownerReferences`` name a uid are indexed by that uid. The three
policies work as upstream's registry and garbage collector make them work together:

- the DELETE sets the finalizers (``deletion_finalizers``, upstream's
  ``deletionFinalizersForGarbageCollection``): ``orphan`` for ``Orphan`` (or the legacy
  ``orphanDependents: true``), ``foregroundDeletion`` for ``Foreground``, neither for
  ``Background``; without a policy the object keeps the one it has;
- ``Background``: once the owner is gone from the store, its dependents are deleted on the
  next loop turn (pods still get their grace period);
- ``Orphan``: the owner, terminating with ``orphan``, waits while the collector removes its
  reference from every dependent, then loses the finalizer and goes;
- ``Foreground``: the owner, terminating with ``foregroundDeletion``, stays while the
  collector deletes its dependents (in the foreground themselves when they have dependents
  of their own); the finalizer is removed when no dependent whose reference sets
  ``blockOwnerDeletion`` is left in the store. Non-blocking dependents are deleted too but
  not waited for.

A dependent with another owner that still exists and is not itself waiting for its
dependents (a *solid* owner, upstream's ``classifyReferences``) is not deleted: only its
reference to the leaving owner is removed.

Like upstream's, this collector learns about objects from the store's event stream (it is a
``Store`` listener), not from the code that wrote them, so every removal counts, however it
happened: a delete, a namespace's purge, a CRD's custom resources going with it. The cost on
a write without owner references or deletion is two dict lookups.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simcluster.apiserver.deferred import call_soon
from simcluster.apiserver.resources import Registry, ResourceType
from simcluster.apiserver.store import Event
from simcluster.apiserver.writer import Writer
from simcluster.errors import Conflict, NotFound

__all__ = ["FOREGROUND", "ORPHAN", "GarbageCollector", "deletion_finalizers"]

Obj = dict[str, Any]
Ref = tuple[str, str, str, str]  # (store key, namespace, name, uid) of an object
ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
_MERGE_PATCH = "application/merge-patch+json"


def _wants(options: Mapping[str, Any], existing: list[str], finalizer: str) -> bool:
    """Upstream's ``shouldOrphanDependents``/``shouldDeleteDependents``: the options, else
    the finalizer the object already has."""
    legacy = options.get("orphanDependents")
    if legacy is not None:
        return bool(legacy) and finalizer == ORPHAN
    policy = options.get("propagationPolicy")
    if policy is not None:
        return policy == ("Orphan" if finalizer == ORPHAN else "Foreground")
    for f in existing:
        if f in (ORPHAN, FOREGROUND):
            return f == finalizer
    return False


def deletion_finalizers(existing: list[str], options: Mapping[str, Any]) -> list[str]:
    """The finalizers an object gets when a DELETE with ``options`` reaches it (the list it
    has when nothing changes, so an unchanged object need not be written)."""
    new = [f for f in existing if f not in (ORPHAN, FOREGROUND)]
    new += [f for f in (ORPHAN, FOREGROUND) if _wants(options, existing, f)]
    return existing if set(new) == set(existing) else new


def _owners(obj: Obj | None) -> set[str]:
    if obj is None:
        return set()
    return {r.get("uid", "") for r in obj["metadata"].get("ownerReferences") or []} - {""}


def _ref(key: str, obj: Obj) -> Ref:
    meta = obj["metadata"]
    return (key, meta.get("namespace", ""), meta["name"], meta["uid"])


def _finalizing(obj: Obj) -> str | None:
    """The collector's finalizer on a terminating object, if it has one."""
    meta = obj["metadata"]
    if not meta.get("deletionTimestamp"):
        return None
    finalizers = meta.get("finalizers") or ()
    return ORPHAN if ORPHAN in finalizers else FOREGROUND if FOREGROUND in finalizers else None


class GarbageCollector:
    def __init__(self, writer: Writer, registry: Registry) -> None:
        self.writer = writer
        self.registry = registry
        self._dependents: dict[str, set[Ref]] = {}
        self._scheduled: set[str] = set()  # owner uids with a pass on the next loop turn
        self._foreground: dict[str, Ref] = {}  # owners waiting for their dependents

    def on_event(self, event: Event) -> None:
        """The store listener: every put and every removal passes here."""
        if event.type == "DELETED":
            self.removed(event.key, event.obj)
        else:
            self.observe(event.key, event.obj, event.old)
            if _finalizing(event.obj):
                self._schedule(_ref(event.key, event.obj))
        if self._foreground:  # a dependent of a waiting owner changed or left: look again
            for uid in (_owners(event.obj) | _owners(event.old)) & self._foreground.keys():
                self._schedule(self._foreground[uid])

    def observe(self, key: str, obj: Obj, old: Obj | None) -> None:
        """Keep the owner -> dependents index current after a write."""
        new_owners, old_owners = _owners(obj), _owners(old)
        if new_owners == old_owners:
            return
        ref = _ref(key, obj)
        for uid in old_owners - new_owners:
            self._dependents.get(uid, set()).discard(ref)
        for uid in new_owners - old_owners:
            self._dependents.setdefault(uid, set()).add(ref)

    def removed(self, key: str, obj: Obj) -> None:
        """Forget ``obj`` as a dependent; collect its own dependents soon (background)."""
        ref = _ref(key, obj)
        for owner in _owners(obj):
            self._dependents.get(owner, set()).discard(ref)
        uid = ref[3]
        self._foreground.pop(uid, None)
        dependents = self._dependents.pop(uid, set())
        if dependents:
            call_soon(lambda: self._collect(uid, dependents))

    # --- passes ------------------------------------------------------------------------
    def _schedule(self, owner: Ref) -> None:
        if owner[3] not in self._scheduled:
            self._scheduled.add(owner[3])
            call_soon(lambda: self._finalize(owner))

    def _finalize(self, ref: Ref) -> None:
        """One pass over a terminating owner that has the orphan or foreground finalizer
        (the events its own writes cause do not schedule another: it looks last)."""
        try:
            self._pass(ref)
        finally:
            self._scheduled.discard(ref[3])

    def _pass(self, ref: Ref) -> None:
        found = self._current(ref)
        if found is None:
            return
        rt, owner = found
        finalizer = _finalizing(owner)
        dependents = sorted(self._dependents.get(ref[3], set()))
        if finalizer == ORPHAN:
            for dep in dependents:
                self._drop_reference(dep, ref[3])
            self._remove_finalizer(rt, owner, ORPHAN)
        elif finalizer == FOREGROUND:
            self._foreground[ref[3]] = ref
            for dep in dependents:
                self._delete_dependent(dep, ref[3], foreground=True)
            if not any(self._blocks(dep, ref[3]) for dep in self._dependents.get(ref[3], ())):
                self._foreground.pop(ref[3], None)
                self._remove_finalizer(rt, owner, FOREGROUND)

    def _collect(self, owner: str, dependents: set[Ref]) -> None:
        for dep in sorted(dependents):
            self._delete_dependent(dep, owner, foreground=False)

    # --- one dependent -----------------------------------------------------------------
    def _current(self, ref: Ref) -> tuple[ResourceType, Obj] | None:
        """The object ``ref`` names, if it is still the one indexed (not a namesake)."""
        key, ns, name, uid = ref
        rt = self.registry.for_key(key)
        if rt is None:
            return None
        try:
            obj = self.writer.lookup(rt, ns, name)
        except NotFound:
            return None
        return (rt, obj) if obj["metadata"]["uid"] == uid else None

    def _delete_dependent(self, dep: Ref, owner: str, *, foreground: bool) -> None:
        found = self._current(dep)
        if found is None:
            return
        rt, obj = found
        if self._has_solid_owner(obj, owner):
            self._drop_reference(dep, owner)
            return
        if obj["metadata"].get("deletionTimestamp"):
            return  # already on its way
        options: Obj = {"preconditions": {"uid": dep[3]}}
        if foreground and self._dependents.get(dep[3]):
            options["propagationPolicy"] = "Foreground"  # its own dependents go first
        self._quietly(lambda: self.writer.delete(rt, dep[1], dep[2], options))

    def _has_solid_owner(self, obj: Obj, leaving: str) -> bool:
        """Another owner of ``obj`` exists and is not waiting for its dependents."""
        ns = obj["metadata"].get("namespace", "")
        for ref in obj["metadata"].get("ownerReferences") or []:
            if ref.get("uid") in ("", None, leaving):
                continue
            rt = self.registry.by_kind(str(ref.get("apiVersion", "")), str(ref.get("kind", "")))
            if rt is None:
                continue
            owner = self._get(rt, ns, str(ref.get("name", "")))
            if owner is None or owner["metadata"]["uid"] != ref["uid"]:
                continue
            if _finalizing(owner) != FOREGROUND:
                return True
        return False

    def _get(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        try:
            return self.writer.lookup(rt, namespace if rt.namespaced else "", name)
        except NotFound:
            return None

    def _blocks(self, dep: Ref, owner: str) -> bool:
        """``dep`` is still in the store with ``blockOwnerDeletion`` on its reference."""
        found = self._current(dep)
        if found is None:
            return False
        refs = found[1]["metadata"].get("ownerReferences") or []
        return any(r.get("uid") == owner and r.get("blockOwnerDeletion") for r in refs)

    def _drop_reference(self, dep: Ref, owner: str) -> None:
        found = self._current(dep)
        if found is None:
            return
        rt, obj = found
        refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != owner]
        patch = {"metadata": {"ownerReferences": refs or None}}
        self._quietly(lambda: self.writer.patch(rt, dep[1], dep[2], _MERGE_PATCH, patch))

    def _remove_finalizer(self, rt: ResourceType, obj: Obj, finalizer: str) -> None:
        meta = obj["metadata"]
        rest = [f for f in meta.get("finalizers") or [] if f != finalizer]
        patch = {
            "metadata": {"finalizers": rest or None, "resourceVersion": meta["resourceVersion"]}
        }
        ns = meta.get("namespace", "")
        self._quietly(lambda: self.writer.patch(rt, ns, meta["name"], _MERGE_PATCH, patch))

    def _quietly(self, write: Any) -> None:
        """A write that lost a race (the object went, or changed: its event brings the
        next pass) is not an error of the collector's."""
        try:
            write()
        except (NotFound, Conflict):
            pass
