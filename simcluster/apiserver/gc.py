"""The garbage collector: deleting an owner deletes its dependents.

Objects whose ``metadata.ownerReferences`` name a uid are indexed by that uid; when the
owner is removed from the store, its dependents are deleted shortly after (background
propagation, as upstream's garbage collector does; pods still get their grace period).
``propagationPolicy: Orphan`` (or the legacy ``orphanDependents: true``) leaves them, with
the reference removed. ``Foreground`` is treated as Background: the owner does not wait.

Like upstream's, this collector learns about objects from the store's event stream (it is a
``Store`` listener), not from the code that wrote them, so every removal counts, however it
happened: a delete, a namespace's purge, a CRD's custom resources going with it.
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver.deferred import call_soon
from simcluster.apiserver.resources import Registry
from simcluster.apiserver.store import Event
from simcluster.apiserver.writer import Writer
from simcluster.errors import NotFound

__all__ = ["GarbageCollector"]

Obj = dict[str, Any]
Ref = tuple[str, str, str, str]  # (store key, namespace, name, uid) of a dependent
_MERGE_PATCH = "application/merge-patch+json"


def _owners(obj: Obj | None) -> set[str]:
    if obj is None:
        return set()
    return {r.get("uid", "") for r in obj["metadata"].get("ownerReferences") or []} - {""}


def _ref(key: str, obj: Obj) -> Ref:
    meta = obj["metadata"]
    return (key, meta.get("namespace", ""), meta["name"], meta["uid"])


class GarbageCollector:
    def __init__(self, writer: Writer, registry: Registry) -> None:
        self.writer = writer
        self.registry = registry
        self._dependents: dict[str, set[Ref]] = {}
        self._orphaning: set[str] = set()

    def on_event(self, event: Event) -> None:
        """The store listener: every put and every removal passes here."""
        if event.type == "DELETED":
            self.removed(event.key, event.obj)
        else:
            self.observe(event.key, event.obj, event.old)

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

    def orphan(self, uid: str) -> None:
        """The owner's deletion asked to orphan its dependents."""
        self._orphaning.add(uid)

    def removed(self, key: str, obj: Obj) -> None:
        """Forget ``obj`` as a dependent; collect (or orphan) its own dependents soon."""
        ref = _ref(key, obj)
        for owner in _owners(obj):
            self._dependents.get(owner, set()).discard(ref)
        uid = ref[3]
        dependents = self._dependents.pop(uid, set())
        orphan = uid in self._orphaning
        self._orphaning.discard(uid)
        if dependents:
            call_soon(lambda: self._collect(uid, dependents, orphan))

    def _collect(self, owner: str, dependents: set[Ref], orphan: bool) -> None:
        for key, ns, name, uid in sorted(dependents):
            rt = self.registry.for_key(key)
            if rt is None:
                continue
            try:
                obj = self.writer.lookup(rt, ns, name)
            except NotFound:
                continue
            if obj["metadata"]["uid"] != uid:
                continue  # a namesake created since: not the dependent we indexed
            if orphan:
                refs = [
                    r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != owner
                ]
                patch = {"metadata": {"ownerReferences": refs or None}}
                self.writer.patch(rt, ns, name, _MERGE_PATCH, patch)
            else:
                self.writer.delete(rt, ns, name, {"preconditions": {"uid": uid}})
