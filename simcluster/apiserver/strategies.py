"""Which kind gets which strategy: a table keyed by store key (``group/plural``).

Kinds absent from the table (nodes, endpoints, ...) have no rules beyond the generic verbs
and metadata validation and are served by the generic ``Strategy``; custom resources by
``CustomResourceStrategy`` (their CRD's schema). A kind
gains rules by getting a class in ``simcluster.apiserver.kinds`` and a row here; the core
never names a kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from simcluster.apiserver.kinds.apiservices import APIServiceStrategy
from simcluster.apiserver.kinds.crds import CustomResourceDefinitionStrategy
from simcluster.apiserver.kinds.custom import CustomResourceStrategy
from simcluster.apiserver.kinds.namespaces import NamespaceStrategy
from simcluster.apiserver.kinds.pods import PodStrategy
from simcluster.apiserver.kinds.quotas import ResourceQuotaStrategy
from simcluster.apiserver.kinds.rbac import RBAC_KEYS, RbacStrategy
from simcluster.apiserver.kinds.serviceaccounts import ServiceAccountStrategy
from simcluster.apiserver.kinds.services import ServiceStrategy
from simcluster.apiserver.kinds.validated import (
    ConfigMapStrategy,
    EventStrategy,
    FlowSchemaStrategy,
    LeaseStrategy,
    PriorityLevelStrategy,
    SecretStrategy,
)
from simcluster.apiserver.strategy import Strategy, StrategyContext

__all__ = ["STRATEGIES", "Strategies", "StrategyFactory"]

StrategyFactory = Callable[[StrategyContext], Strategy]

STRATEGIES: Mapping[str, StrategyFactory] = MappingProxyType(
    {
        "/pods": PodStrategy,
        "/namespaces": NamespaceStrategy,
        "/services": ServiceStrategy,
        "/resourcequotas": ResourceQuotaStrategy,
        "/serviceaccounts": ServiceAccountStrategy,
        "apiextensions.k8s.io/customresourcedefinitions": CustomResourceDefinitionStrategy,
        "apiregistration.k8s.io/apiservices": APIServiceStrategy,
        **dict.fromkeys(RBAC_KEYS, RbacStrategy),
        "/configmaps": ConfigMapStrategy,
        "/secrets": SecretStrategy,
        "/events": EventStrategy,
        "coordination.k8s.io/leases": LeaseStrategy,
        "flowcontrol.apiserver.k8s.io/flowschemas": FlowSchemaStrategy,
        "flowcontrol.apiserver.k8s.io/prioritylevelconfigurations": PriorityLevelStrategy,
    }
)


class Strategies:
    """One strategy instance per kind in ``table`` (instances keep per-kind state, such as
    the next service IP), and one generic instance shared by every other kind."""

    def __init__(
        self, ctx: StrategyContext, table: Mapping[str, StrategyFactory] = STRATEGIES
    ) -> None:
        self._by_key = {key: make(ctx) for key, make in table.items()}
        self.generic = Strategy(ctx)
        self.custom = CustomResourceStrategy(ctx)
        self._registry = ctx.registry
        #: key -> custom or generic, once the key is served (a key is one or the other for
        #: good: no CRD serves a built-in group's resource)
        self._resolved: dict[str, Strategy] = {}

    def for_key(self, key: str) -> Strategy:
        found = self._by_key.get(key) or self._resolved.get(key)
        if found is not None:
            return found
        rt = self._registry.for_key(key)
        if rt is None:
            return self.generic
        found = self._resolved[key] = self.generic if rt.builtin else self.custom
        return found
