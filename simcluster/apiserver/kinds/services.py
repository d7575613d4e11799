"""The service strategy: a cluster IP from the service range, and the fields upstream
defaults (type, session affinity, IP families, port protocol and target port).

The cluster IP is allocated once and then immutable, as upstream's allocator: an update
that changes it is refused, one that omits it keeps the old address.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from simcluster.apiserver.meta import validate_name
from simcluster.apiserver.resources import ResourceType
from simcluster.apiserver.strategy import Strategy, StrategyContext, invalid

__all__ = ["ServiceStrategy"]

Obj = dict[str, Any]
_FIRST_IP = "10.96.0.10"


class ServiceStrategy(Strategy):
    def __init__(self, ctx: StrategyContext) -> None:
        self._next_ip = int(ipaddress.IPv4Address(_FIRST_IP))

    def validate_name(self, rt: ResourceType, name: str) -> None:
        validate_name(rt.kind, rt.group, name, dns_label=True)  # it becomes a DNS label

    def prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        self._default(rt, obj, None)

    def prepare_update(self, rt: ResourceType, new: Obj, old: Obj, subresource: str) -> None:
        if not subresource:
            self._default(rt, new, old)

    def _default(self, rt: ResourceType, svc: Obj, old: Obj | None) -> None:
        spec = svc.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        spec["clusterIP"] = self._cluster_ip(rt, svc, spec, old)
        spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
        svc.setdefault("status", {"loadBalancer": {}})

    def _cluster_ip(self, rt: ResourceType, svc: Obj, spec: Obj, old: Obj | None) -> Any:
        """The old address on update (a change is refused); else the one asked for, "None"
        (headless), or the next free one."""
        old_ip = ((old or {}).get("spec") or {}).get("clusterIP")
        if old_ip:
            if spec.get("clusterIP") not in (None, "", old_ip):
                raise invalid(
                    rt, svc["metadata"]["name"], "spec.clusterIPs[0]", "field is immutable"
                )
            return old_ip
        if spec.get("clusterIP") != "None" and not spec.get("clusterIP"):
            ip = str(ipaddress.IPv4Address(self._next_ip))
            self._next_ip += 1
            return ip
        return spec.get("clusterIP")
