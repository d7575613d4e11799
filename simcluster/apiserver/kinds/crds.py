"""The CustomResourceDefinition strategy: creating one serves its kind, deleting it purges
its custom resources and stops serving the kind.

Upstream's apiextensions server checks the names, marks the CRD ``NamesAccepted`` and
``Established`` and starts serving; the finalizer ``customresourcecleanup`` deletes the
custom resources before the CRD goes. Both happen here within the create or delete request.
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver.meta import rfc3339
from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.strategy import Strategy, StrategyContext, invalid
from simcluster.errors import Conflict

__all__ = ["CustomResourceDefinitionStrategy"]

Obj = dict[str, Any]
_CONDITIONS = (
    ("NamesAccepted", "NoConflicts", "no conflicts found"),
    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
)


class CustomResourceDefinitionStrategy(Strategy):
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

    def after_remove(self, rt: ResourceType, obj: Obj) -> None:
        spec = obj.get("spec") or {}
        plural, group = (spec.get("names") or {}).get("plural", ""), spec.get("group", "")
        key = f"{group}/{plural}"
        for cr in list(self.objects.iter(key)):
            self.objects.remove(key, cr)
        self.registry.remove_group_resource(group, plural)
