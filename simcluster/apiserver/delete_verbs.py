"""The delete verbs — delete, deletecollection — and graceful deletion.

A DELETE is rarely a removal: preconditions, DeleteOptions, the kind's grace period and the
garbage collector's finalizers decide whether the object goes now or is written as
terminating (``_mark_deleting``) for the kubelet or the collector to finish. That state
machine is the one place the server writes deletionTimestamp, so it stands alone.
deletecollection deletes what a list finds, so these verbs stand on the read verbs.
"""

from __future__ import annotations

import builtins
import datetime as dt

from simcluster.apiserver.core_base import Obj, copy_object
from simcluster.apiserver.deleteoptions import check_delete_options, requested_grace
from simcluster.apiserver.gc import deletion_finalizers
from simcluster.apiserver.listoptions import ListOptions
from simcluster.apiserver.meta import now, rfc3339
from simcluster.apiserver.read_verbs import ReadVerbs
from simcluster.apiserver.resources import ResourceType
from simcluster.errors import Conflict, NotFound

__all__ = ["DeleteVerbs"]


class DeleteVerbs(ReadVerbs):
    """delete and deletecollection, with preconditions, grace periods and finalizers."""

    def delete(self, rt: ResourceType, namespace: str, name: str, options: Obj | None) -> Obj:
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
        if options.get("dryRun"):
            return obj
        strategy = self.strategies.for_key(rt.key)
        grace = strategy.grace_period(rt, obj, requested_grace(options))
        finalizers = deletion_finalizers(list(meta.get("finalizers") or []), options)
        if grace == 0 and not finalizers:
            if strategy.graceful_delete and not meta.get("deletionTimestamp"):
                # upstream's graceful path at grace 0: the object is written with its
                # deletionTimestamp (MODIFIED), then deleted (DELETED), and that is answered
                obj = self._mark_deleting(rt, obj, 0, finalizers)
            return self._remove(rt, obj)
        return self._mark_deleting(rt, obj, grace, finalizers)

    def _mark_deleting(
        self, rt: ResourceType, obj: Obj, grace: int, finalizers: builtins.list[str]
    ) -> Obj:
        """Write ``obj`` as terminating: its deletionTimestamp (generation bumped when the
        deletion starts, as upstream's ``BeforeDelete``/``markAsDeleting``), a shorter grace
        period than it had, and the garbage collector's finalizers the DELETE asked for."""
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
        if shorter:
            new["metadata"]["deletionTimestamp"] = rfc3339(now() + dt.timedelta(seconds=grace))
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            if "generation" in new["metadata"] and not meta.get("deletionTimestamp"):
                new["metadata"]["generation"] = int(new["metadata"]["generation"]) + 1
            self.strategies.for_key(rt.key).prepare_delete(rt, new)
        return self.write(rt, new, obj)

    def delete_collection(
        self, rt: ResourceType, namespace: str | None, opts: ListOptions, options: Obj | None
    ) -> Obj:
        listed = self.list(rt, namespace, ListOptions(opts.label_selector, opts.field_selector))
        out = []
        for item in listed["items"]:
            m = item["metadata"]
            try:
                out.append(self.delete(rt, m.get("namespace", ""), m["name"], options))
            except NotFound:
                continue
        listed["items"] = out
        return listed
