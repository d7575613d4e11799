"""The APIService strategy (apiregistration.k8s.io/v1), and the local APIServices every
cluster lists.

Why: a bare kube-apiserver lists one APIService per built-in group version it serves
(``v1.``, ``v1.apps``, ``v2.autoscaling``...), without ``spec.service`` and ``Available``
because they are served locally; operators' tools read them (``kubectl get apiservices``)
and install their own for aggregated APIs (metrics-server's ``v1beta1.metrics.k8s.io``).
The priorities are upstream's (``apiservice_priorities.yaml``); a group version without
one gets no APIService, as upstream skips it.

What is not modelled: simcluster proxies no aggregated API. An APIService with a service
is stored and listed, and its ``Available`` condition — set when it is created, as
upstream's availability controller would first report it — is False: ``ServiceNotFound``
when the Service does not exist, else ``FailedDiscoveryCheck``. It is not re-evaluated
later (a status write may change it).
"""

from __future__ import annotations

from importlib import resources as importlib_resources
from typing import Any

import yaml

from simcluster.apiserver.meta import rfc3339, validate_name
from simcluster.apiserver.resources import Registry, ResourceType
from simcluster.apiserver.strategy import Strategy, StrategyContext
from simcluster.apiserver.validation.apiservices import api_service, api_service_status
from simcluster.apiserver.validation.fields import Cause

__all__ = ["APIServiceStrategy", "local_api_services", "priorities"]

Obj = dict[str, Any]


def priorities() -> dict[tuple[str, str], tuple[int, int]]:
    """(group, version) -> (groupPriorityMinimum, versionPriority), upstream's table."""
    text = (
        importlib_resources.files("simcluster.apiserver")
        .joinpath("apiservice_priorities.yaml")
        .read_text()
    )
    out = {}
    for group, versions in yaml.safe_load(text).items():
        for version, (group_min, version_prio) in versions.items():
            out[(group, version)] = (int(group_min), int(version_prio))
    return out


def local_api_services(registry: Registry) -> list[Obj]:
    """One local APIService per group version ``registry`` serves that upstream lists."""
    table = priorities()
    out = []
    for group in registry.group_order:
        for version in registry.versions(group):
            if (group, version) not in table:
                continue
            group_min, version_prio = table[(group, version)]
            spec = {"group": group, "version": version, "groupPriorityMinimum": group_min}
            spec["versionPriority"] = version_prio
            out.append({"metadata": {"name": f"{version}.{group}"}, "spec": spec})
    return out


def _available(status: str, reason: str, message: str) -> Obj:
    return {
        "type": "Available",
        "status": status,
        "lastTransitionTime": rfc3339(),
        "reason": reason,
        "message": message,
    }


class APIServiceStrategy(Strategy):
    def __init__(self, ctx: StrategyContext) -> None:
        self.objects = ctx.objects

    def validate_name(self, rt: ResourceType, name: str) -> None:
        # a path segment ("v1." ends with a dot); that it is version.group is a spec rule
        validate_name(rt.kind, rt.group, name, dns_label=False, path_segment=True)

    def prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        obj["status"] = {"conditions": [self._availability(obj.get("spec") or {})]}

    def _availability(self, spec: Obj) -> Obj:
        service = spec.get("service")
        if service is None:
            return _available("True", "Local", "Local APIServices are always available")
        ns, name = service.get("namespace") or "", service.get("name") or ""
        if self.objects.get("/services", ns, name) is None:
            return _available(
                "False", "ServiceNotFound", f'service/{name} in "{ns}" is not present'
            )
        return _available(
            "False",
            "FailedDiscoveryCheck",
            f'failing or missing response from service/{name} in "{ns}": '
            "simcluster does not proxy aggregated APIs",
        )

    def create_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        return api_service(obj)

    def update_causes(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> list[Cause]:
        return api_service_status(new) if subresource else api_service(new)
