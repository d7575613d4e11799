"""ResourceQuota: usage in ``status.used``, and the admission of pods against it.

Upstream splits this between the quota admission plugin (refuse a pod that would exceed a
quota, or that names no request a quota limits) and the quota controller (recompute
``status.used``). Both are here, shared by two strategies: pods consult and refresh the
ledger as they come and go, and a new quota starts with its namespace's current usage.
Quantities are compared in milli-units, so CPU and counts compare exactly.
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver import pods
from simcluster.apiserver.resources import Registry, ResourceType
from simcluster.apiserver.strategy import Strategy, StrategyContext
from simcluster.apiserver.validation.fields import Cause
from simcluster.apiserver.validation.kinds import resource_quota
from simcluster.apiserver.writer import Objects, Writer
from simcluster.errors import Forbidden
from simcluster.quantity import format_cpu, format_memory, to_milli, to_units

__all__ = ["QuotaLedger", "ResourceQuotaStrategy"]

Obj = dict[str, Any]
PODS, QUOTAS = "/pods", "/resourcequotas"
_QUOTA_KEYS = (
    "pods",
    "count/pods",
    "requests.cpu",
    "cpu",
    "requests.memory",
    "memory",
    "limits.cpu",
    "limits.memory",
)
_MUST_SPECIFY = ("requests.cpu", "requests.memory", "limits.cpu", "limits.memory")


def _pod_usage(pod: Obj) -> dict[str, int]:
    cpu, mem = pods.pod_requests(pod)
    lcpu = lmem = 0
    for c in pod["spec"].get("containers") or []:
        lim = (c.get("resources") or {}).get("limits") or {}
        lcpu += to_milli(lim["cpu"]) if "cpu" in lim else 0
        lmem += to_units(lim["memory"]) if "memory" in lim else 0
    return {
        "pods": 1000, "count/pods": 1000, "requests.cpu": cpu, "cpu": cpu,
        "requests.memory": mem * 1000, "memory": mem * 1000,
        "limits.cpu": lcpu, "limits.memory": lmem * 1000,
    }  # fmt: skip


def _fmt(key: str, milli: int) -> str:
    if "cpu" in key:
        return format_cpu(milli)
    if "memory" in key:
        return format_memory(milli // 1000)
    return str(milli // 1000)


def _hard(quota: Obj) -> dict[str, Any]:
    return (quota.get("spec") or {}).get("hard") or {}


class QuotaLedger:
    """A namespace's quota usage, read from the pods in the store."""

    def __init__(self, objects: Objects, writer: Writer, registry: Registry) -> None:
        self.objects = objects
        self.writer = writer
        self.registry = registry

    def used(self, namespace: str, hard: dict[str, Any]) -> dict[str, str]:
        """``status.used`` for the keys in ``hard``: terminal pods no longer count."""
        totals = dict.fromkeys(hard, 0)
        for pod in self.objects.iter(PODS, namespace):
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            usage = _pod_usage(pod)
            for k in totals:
                totals[k] += usage.get(k, 0)
        return {k: _fmt(k, v) for k, v in totals.items()}

    def admit(self, pod: Obj) -> None:
        """Refuse (403) a pod over any quota of its namespace, as the admission plugin."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        quotas = list(self.objects.iter(QUOTAS, namespace))
        if not quotas:
            return
        usage = _pod_usage(pod)
        for quota in quotas:
            _check_quota(quota, name, usage)

    def refresh(self, namespace: str) -> None:
        """Rewrite the namespace's quotas whose ``status.used`` changed."""
        rt = self.registry.get("", "v1", "resourcequotas")
        assert rt is not None
        for quota in list(self.objects.iter(QUOTAS, namespace)):
            hard = _hard(quota)
            used = self.used(namespace, hard)
            if (quota.get("status") or {}).get("used") != used:
                new = dict(quota, status={"hard": dict(hard), "used": used})
                new["metadata"] = dict(quota["metadata"])
                self.writer.write(rt, new, quota)


def _check_quota(quota: Obj, pod_name: str, usage: dict[str, int]) -> None:
    hard = _hard(quota)
    used = (quota.get("status") or {}).get("used") or {}
    qname = quota["metadata"]["name"]
    missing = [k for k in hard if k in _MUST_SPECIFY and usage.get(k, 0) == 0]
    if missing:
        raise Forbidden.for_object(
            "pods", "", pod_name, f"failed quota: {qname}: must specify {','.join(sorted(missing))}"
        )
    over = [
        k for k in hard
        if k in _QUOTA_KEYS and to_milli(used.get(k, "0")) + usage[k] > to_milli(hard[k])
    ]  # fmt: skip
    if over:
        req = ",".join(f"{k}={_fmt(k, usage[k])}" for k in sorted(over))
        use = ",".join(f"{k}={used.get(k, '0')}" for k in sorted(over))
        lim = ",".join(f"{k}={hard[k]}" for k in sorted(over))
        raise Forbidden.for_object(
            "pods",
            "",
            pod_name,
            f"exceeded quota: {qname}, requested: {req}, used: {use}, limited: {lim}",
        )


class ResourceQuotaStrategy(Strategy):
    """A new quota's status starts at its namespace's current usage, not at zero."""

    def __init__(self, ctx: StrategyContext) -> None:
        self.ledger = QuotaLedger(ctx.objects, ctx.writer, ctx.registry)

    def create_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        return resource_quota(obj)

    def prepare_create(self, rt: ResourceType, obj: Obj) -> None:
        hard = _hard(obj)
        obj["status"] = {
            "hard": dict(hard),
            "used": self.ledger.used(obj["metadata"]["namespace"], hard),
        }
