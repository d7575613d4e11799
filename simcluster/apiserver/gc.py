"""The garbage collector: deleting an owner deletes its dependents.

Objects whose ``metadata.ownerReferences`` name a uid are indexed by that uid; when the
owner is removed from the store, its dependents are deleted shortly after (background
propagation, as upstream's garbage collector does; pods still get their grace period).
``propagationPolicy: Orphan`` (or the legacy ``orphanDependents: true``) leaves them, with
the reference removed. ``Foreground`` is treated as Background: the owner does not wait.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simcluster.apiserver.deferred import call_soon

if TYPE_CHECKING:
    from simcluster.apiserver.core import ApiCore

__all__ = ["GarbageCollector"]

Obj = dict[str, Any]
Ref = tuple[str, str, str, str]  # (store key, namespace, name, uid) of a dependent


class GarbageCollector:
    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self._dependents: dict[str, set[Ref]] = {}
        self._orphaning: set[str] = set()

    def _owners(self, obj: Obj | None) -> set[str]:
        if obj is None:
            return set()
        return {r.get("uid", "") for r in obj["metadata"].get("ownerReferences") or []} - {""}

    def observe(self, key: str, obj: Obj, old: Obj | None) -> None:
        """Keep the owner -> dependents index current after a write."""
        new_owners, old_owners = self._owners(obj), self._owners(old)
        if new_owners == old_owners:
            return
        meta = obj["metadata"]
        ref = (key, meta.get("namespace", ""), meta["name"], meta["uid"])
        for uid in old_owners - new_owners:
            self._dependents.get(uid, set()).discard(ref)
        for uid in new_owners - old_owners:
            self._dependents.setdefault(uid, set()).add(ref)

    def orphan(self, uid: str) -> None:
        """The owner's deletion asked to orphan its dependents."""
        self._orphaning.add(uid)

    def removed(self, key: str, obj: Obj) -> None:
        meta = obj["metadata"]
        ref = (key, meta.get("namespace", ""), meta["name"], meta["uid"])
        for owner in self._owners(obj):
            self._dependents.get(owner, set()).discard(ref)
        dependents = self._dependents.pop(meta["uid"], set())
        orphan = meta["uid"] in self._orphaning
        self._orphaning.discard(meta["uid"])
        if dependents:
            call_soon(lambda: self._collect(meta["uid"], dependents, orphan))

    def _collect(self, owner: str, dependents: set[Ref], orphan: bool) -> None:
        core = self.core
        for key, ns, name, uid in sorted(dependents):
            rt = core.strategies.type_for_key(key)
            obj = core.store.get(key, ns, name)
            if rt is None or obj is None or obj["metadata"]["uid"] != uid:
                continue
            if orphan:
                refs = [
                    r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != owner
                ]
                patch = {"metadata": {"ownerReferences": refs or None}}
                core.patch(rt, ns, name, "application/merge-patch+json", patch)
            else:
                core.delete(rt, ns, name, {"preconditions": {"uid": uid}})
