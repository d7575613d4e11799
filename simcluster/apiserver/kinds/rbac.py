"""The RBAC strategy: roles and bindings are stored, not enforced (there is no authorizer),
and their names are path segments, as upstream's ``ValidateRBACName``: anything but ``.``,
``..``, ``/`` and ``%``, so ``system:controller:foo`` is a valid role name. Rules, role
references and subjects are validated as upstream (``validation.kinds``).
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver.meta import validate_name
from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.strategy import Strategy
from simcluster.apiserver.validation import kinds
from simcluster.apiserver.validation.fields import Cause

__all__ = ["RBAC_KEYS", "RbacStrategy"]

RBAC_KEYS = tuple(
    f"rbac.authorization.k8s.io/{plural}"
    for plural in ("roles", "rolebindings", "clusterroles", "clusterrolebindings")
)


class RbacStrategy(Strategy):
    def validate_name(self, rt: ResourceType, name: str) -> None:
        validate_name(rt.kind, rt.group, name, dns_label=False, path_segment=True)

    def create_causes(self, rt: ResourceType, obj: dict[str, Any]) -> list[Cause]:
        if rt.plural.endswith("bindings"):
            return kinds.role_binding(obj)
        return kinds.rules(obj)

    def update_causes(
        self, rt: ResourceType, new: dict[str, Any], old: dict[str, Any], subresource: str
    ) -> list[Cause]:
        out = self.create_causes(rt, new)
        if rt.plural.endswith("bindings"):
            out += kinds.role_binding_update(new, old)
        return out
