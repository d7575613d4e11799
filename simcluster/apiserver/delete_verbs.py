"""The delete verbs — delete, deletecollection — and graceful deletion.

A DELETE is rarely a removal: preconditions, DeleteOptions, the kind's grace period and the
garbage collector's finalizers decide whether the object goes now or is written as
terminating (``_mark_deleting``) for the kubelet or the collector to finish. That state
machine is the one place the server writes deletionTimestamp, so it stands alone.
deletecollection deletes what a list finds, so these verbs stand on the read verbs.

``deletion`` also says whether the object left the store (``Deletion.removed``): what the
DELETE answers depends on it (the dispatcher's ``delete_answer``), as upstream's registry
answers a terminating object itself and a removed one as its kind's ``deleteAnswer`` says.
A dry run computes the same outcome and writes nothing: the object as it would be marked.
"""

from __future__ import annotations

import builtins
import datetime as dt
from dataclasses import dataclass

from simcluster.apiserver.core_base import Obj, copy_object
from simcluster.apiserver.deleteoptions import check_delete_options, requested_grace
from simcluster.apiserver.gc import deletion_finalizers
from simcluster.apiserver.listoptions import ListOptions
from simcluster.apiserver.meta import now, rfc3339
from simcluster.apiserver.read_verbs import ReadVerbs
from simcluster.apiserver.resources import ResourceType
from simcluster.errors import Conflict, NotFound

__all__ = ["DeleteVerbs", "Deletion", "delete_answer", "delete_code"]


@dataclass(frozen=True, slots=True)
class Deletion:
    """What a DELETE did: ``obj`` as it was removed, or as it is stored now (terminating);
    ``removed`` says which (on a dry run, which it would be)."""

    obj: Obj
    removed: bool


class DeleteVerbs(ReadVerbs):
    """delete and deletecollection, with preconditions, grace periods and finalizers."""

    def delete(self, rt: ResourceType, namespace: str, name: str, options: Obj | None) -> Obj:
        """Delete (or start deleting) one object; the object as removed or marked."""
        return self.deletion(rt, namespace, name, options).obj

    def deletion(
        self, rt: ResourceType, namespace: str, name: str, options: Obj | None
    ) -> Deletion:
        """``delete``, saying whether the object left the store."""
        options = options or {}
        obj = self.lookup(rt, namespace, name)
        pre = options.get("preconditions") or {}
        meta = obj["metadata"]
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise Conflict.for_object(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta['uid']}",  # noqa: E501
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise Conflict.for_object(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                f"ResourceVersion in object meta: {meta['resourceVersion']}",
            )
        check_delete_options(options)
        dry = bool(options.get("dryRun"))
        strategy = self.strategies.for_key(rt.key)
        grace = strategy.grace_period(rt, obj, requested_grace(options))
        finalizers = deletion_finalizers(list(meta.get("finalizers") or []), options)
        if grace == 0 and not finalizers:
            if strategy.graceful_delete and not meta.get("deletionTimestamp"):
                # upstream's graceful path at grace 0: the object is written with its
                # deletionTimestamp (MODIFIED), then deleted (DELETED), and that is answered
                obj = self._mark_deleting(rt, obj, 0, finalizers, dry)
            return Deletion(obj if dry else self._remove(rt, obj), removed=True)
        return Deletion(self._mark_deleting(rt, obj, grace, finalizers, dry), removed=False)

    def _mark_deleting(
        self, rt: ResourceType, obj: Obj, grace: int, finalizers: builtins.list[str], dry: bool
    ) -> Obj:
        """Write ``obj`` as terminating: its deletionTimestamp (generation bumped when the
        deletion starts, as upstream's ``BeforeDelete``/``markAsDeleting``), a shorter grace
        period than it had, and the garbage collector's finalizers the DELETE asked for.
        ``dry``: the object as it would be written, nothing stored."""
        meta = obj["metadata"]
        shorter = not meta.get("deletionTimestamp") or (
            int(meta.get("deletionGracePeriodSeconds") or 0) > grace
        )
        if not shorter and finalizers == (meta.get("finalizers") or []):
            return obj  # already terminating with a shorter (or equal) grace period
        new = copy_object(obj)
        if finalizers:
            new["metadata"]["finalizers"] = finalizers
        else:
            new["metadata"].pop("finalizers", None)
        strategy = self.strategies.for_key(rt.key)
        if shorter:
            new["metadata"]["deletionTimestamp"] = rfc3339(now() + dt.timedelta(seconds=grace))
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            if "generation" in new["metadata"] and not meta.get("deletionTimestamp"):
                new["metadata"]["generation"] = int(new["metadata"]["generation"]) + 1
            strategy.prepare_delete(rt, new)
        if dry:
            return new
        stored = self.write(rt, new, obj)
        if shorter:
            strategy.after_mark_deleting(rt, stored)
        return stored

    def delete_collection(
        self, rt: ResourceType, namespace: str | None, opts: ListOptions, options: Obj | None
    ) -> Obj:
        """Delete what a list finds; the list as it was before (upstream's
        ``DeleteCollection`` answers the listed items, not what each deletion made of them)."""
        listed = self.list(rt, namespace, ListOptions(opts.label_selector, opts.field_selector))
        for item in listed["items"]:
            m = item["metadata"]
            try:
                self.delete(rt, m.get("namespace", ""), m["name"], options)
            except NotFound:
                continue
        return listed


def delete_answer(rt: ResourceType, done: Deletion) -> Obj:
    """What a DELETE answers, as upstream's ``finalizeDelete``: an object still stored
    (terminating) is answered itself; a removed one as its kind's ``delete_answer`` says —
    the object, or a Status whose details name it (``kind`` holds the resource, as
    upstream's does)."""
    if rt.delete_answer == "object" or not done.removed:
        return done.obj
    meta = done.obj["metadata"]
    details: Obj = {"name": meta["name"]}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    if meta.get("uid"):
        details["uid"] = meta["uid"]
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def delete_code(done: Deletion, options: Obj) -> int:
    """200, or 202 Accepted for an object left terminating by a DELETE that asked for
    cascading deletion with the legacy ``orphanDependents: false`` (upstream's handler)."""
    return 202 if not done.removed and options.get("orphanDependents") is False else 200
