"""The RBAC strategy: roles and bindings are stored, not enforced (there is no authorizer),
and their names are path segments, as upstream's ``ValidateRBACName``: anything but ``.``,
``..``, ``/`` and ``%``, so ``system:controller:foo`` is a valid role name.
"""

from __future__ import annotations

from simcluster.apiserver.meta import validate_name
from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.strategy import Strategy

__all__ = ["RBAC_KEYS", "RbacStrategy"]

RBAC_KEYS = tuple(
    f"rbac.authorization.k8s.io/{plural}"
    for plural in ("roles", "rolebindings", "clusterroles", "clusterrolebindings")
)


class RbacStrategy(Strategy):
    def validate_name(self, rt: ResourceType, name: str) -> None:
        validate_name(rt.kind, rt.group, name, dns_label=False, path_segment=True)
