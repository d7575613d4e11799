"""The CustomResourceDefinition strategy: creating one serves its kind, deleting it purges
its custom resources and stops serving the kind.

Upstream's apiextensions server checks the names, marks the CRD ``NamesAccepted`` and
``Established`` and starts serving; the finalizer ``customresourcecleanup`` deletes the
custom resources before the CRD goes. Both happen here within the create or delete request:
a DELETE first writes the CRD marked as upstream's CRD REST does (deletionTimestamp, that
finalizer, a ``Terminating`` condition), purges its custom resources, removes it, and
answers the marked CRD, as upstream answers the first DELETE.
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver.meta import rfc3339
from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.strategy import Strategy, StrategyContext, invalid
from simcluster.errors import Conflict

__all__ = ["CustomResourceDefinitionStrategy"]

Obj = dict[str, Any]
_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
_CONDITIONS = (
    ("NamesAccepted", "NoConflicts", "no conflicts found"),
    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
)


class CustomResourceDefinitionStrategy(Strategy):
    #: written marked (MODIFIED) before it goes (DELETED), as upstream's cleanup finalizer makes it
    graceful_delete = True

    def __init__(self, ctx: StrategyContext) -> None:
        self.objects = ctx.objects
        self.registry = ctx.registry

    def prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        name = obj["metadata"]["name"]
        if name != f"{names.get('plural', '')}.{spec.get('group', '')}":
            raise invalid(
                rt, name, "metadata.name", f'"{name}": must be spec.names.plural+"."+spec.group'
            )
        for served in self.registry.register_crd(obj):
            if served.key != f"{spec['group']}/{names['plural']}":
                raise Conflict.for_object(rt.plural, rt.group, name, "inconsistent names")
        ts = rfc3339()
        obj["status"] = {
            "conditions": [
                {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": ts}
                for t, r, m in _CONDITIONS
            ],
            "acceptedNames": names,
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
        }

    def prepare_delete(self, rt: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        if not meta.get("finalizers"):
            # the cleanup runs within this request; a CRD held by other finalizers is
            # purged when the last of them goes (the update that removes it)
            meta["finalizers"] = [_CLEANUP_FINALIZER]
        status = obj.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Terminating"]
        conditions.append(
            {
                "type": "Terminating",
                "status": "True",
                "reason": "InstanceDeletionPending",
                "message": "CustomResourceDefinition marked for deletion; "
                "CustomResource deletion will begin soon",
                "lastTransitionTime": rfc3339(),
            }
        )
        status["conditions"] = conditions

    def after_remove(self, rt: ResourceType, obj: Obj) -> None:
        spec = obj.get("spec") or {}
        plural, group = (spec.get("names") or {}).get("plural", ""), spec.get("group", "")
        key = f"{group}/{plural}"
        for cr in list(self.objects.iter(key)):
            self.objects.remove(key, cr)
        self.registry.remove_group_resource(group, plural)
