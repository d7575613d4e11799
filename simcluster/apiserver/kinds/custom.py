"""Custom resources: each held to its CRD's schema for the version it is written in.

Upstream's apiextensions server prunes the fields a CRD does not declare and refuses values
its ``openAPIV3Schema`` does not admit (``simcluster.apiserver.validation.schema``). The CRD
is read from the store at each write, so a CRD updated in place applies at once; a kind
served without a schema (none in the CRD) keeps every field, as ``preserve-unknown-fields``
does.
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.strategy import Strategy, StrategyContext
from simcluster.apiserver.validation.fields import Cause
from simcluster.apiserver.validation.schema import prune, schema_causes

__all__ = ["CustomResourceStrategy"]

Obj = dict[str, Any]
_CRDS = "apiextensions.k8s.io/customresourcedefinitions"


class CustomResourceStrategy(Strategy):
    def __init__(self, ctx: StrategyContext) -> None:
        self.objects = ctx.objects

    def _schema(self, rt: ResourceType) -> Obj | None:
        crd = self.objects.get(_CRDS, "", f"{rt.plural}.{rt.group}")
        for version in ((crd or {}).get("spec") or {}).get("versions") or ():
            if version.get("name") == rt.version:
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                return schema if isinstance(schema, dict) else None
        return None

    def prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        if (schema := self._schema(rt)) is not None:
            prune(schema, obj)

    def create_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        schema = self._schema(rt)
        return [] if schema is None else schema_causes(schema, obj)

    def prepare_update(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> None:
        if (schema := self._schema(rt)) is not None:
            prune(schema, new)

    def update_causes(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> list[Cause]:
        return self.create_causes(rt, new)
