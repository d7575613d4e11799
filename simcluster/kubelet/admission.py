"""Kubelet admission: the checks the real kubelet runs on a pod bound to its node before
starting it, with the same reasons and messages (a scheduler that misplaces pods sees them
fail here as on a real cluster, and nothing is capacity-checked at bind time).

Order and wording follow the kubelet's predicate admit handler: resources (OutOfpods,
OutOfcpu, OutOfmemory), then node selector/required node affinity (NodeAffinity), then
NoExecute taints the pod does not tolerate (TaintToleration).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Capacity", "admit"]

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Capacity:
    pods: int
    cpu_milli: int
    memory: int


def _term_matches(term: Obj, labels: Mapping[str, str]) -> bool:
    for req in term.get("matchExpressions") or []:
        key, op, values = req.get("key", ""), req.get("operator", ""), req.get("values") or []
        present, value = key in labels, labels.get(key, "")
        if op == "In" and not (present and value in values):
            return False
        if op == "NotIn" and present and value in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op in ("Gt", "Lt"):
            try:
                ok = present and (
                    int(value) > int(values[0]) if op == "Gt" else int(value) < int(values[0])
                )
            except (ValueError, IndexError):
                ok = False
            if not ok:
                return False
    return True


def _affinity_ok(spec: Obj, labels: Mapping[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(_term_matches(t, labels) for t in terms)


def _tolerates(tolerations: Sequence[Obj], taint: Obj) -> bool:
    for t in tolerations:
        if t.get("effect") not in (None, "", taint.get("effect")):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def admit(
    spec: Obj,
    requests: tuple[int, int],
    used: tuple[int, int, int],
    cap: Capacity,
    labels: Mapping[str, str],
    taints: Sequence[Obj],
) -> tuple[str, str] | None:
    """None if admitted, else (reason, message) for the pod's Failed status.

    ``requests`` = (milli-CPU, memory bytes); ``used`` = (pods, milli-CPU, memory) of the
    pods already admitted and not terminated."""
    cpu, mem = requests
    pods_used, cpu_used, mem_used = used
    for reason, res, req, in_use, limit in (
        ("OutOfpods", "pods", 1, pods_used, cap.pods),
        ("OutOfcpu", "cpu", cpu, cpu_used, cap.cpu_milli),
        ("OutOfmemory", "memory", mem, mem_used, cap.memory),
    ):
        if req and in_use + req > limit:
            return reason, (
                f"Pod was rejected: Node didn't have enough resource: {res}, "
                f"requested: {req}, used: {in_use}, capacity: {limit}"
            )
    if not _affinity_ok(spec, labels):
        return "NodeAffinity", "Pod was rejected: Predicate NodeAffinity failed"
    tolerations = spec.get("tolerations") or []
    for taint in taints:
        if taint.get("effect") == "NoExecute" and not _tolerates(tolerations, taint):
            return "TaintToleration", "Pod was rejected: Predicate TaintToleration failed"
    return None
