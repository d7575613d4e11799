"""Kinds whose only rules are field validation: ConfigMap, Secret, Lease, Event (core/v1),
and the API Priority and Fairness kinds. Each class names its kind's rules from
``simcluster.apiserver.validation.kinds``; the base class checks the metadata.
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.strategy import Strategy
from simcluster.apiserver.validation import kinds
from simcluster.apiserver.validation.fields import Cause

__all__ = [
    "ConfigMapStrategy",
    "EventStrategy",
    "FlowSchemaStrategy",
    "LeaseStrategy",
    "PriorityLevelStrategy",
    "SecretStrategy",
]

Obj = dict[str, Any]


class ConfigMapStrategy(Strategy):
    def create_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        return kinds.configmap(obj)


class SecretStrategy(Strategy):
    def create_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        return kinds.secret(obj)

    def update_causes(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> list[Cause]:
        return kinds.secret(new) + kinds.secret_update(new, old)


class LeaseStrategy(Strategy):
    def create_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        return kinds.lease(obj)


class EventStrategy(Strategy):
    def create_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        return kinds.event(obj)


class FlowSchemaStrategy(Strategy):
    def create_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        return kinds.flow_schema(obj)


class PriorityLevelStrategy(Strategy):
    def create_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        return kinds.priority_level(obj)
