"""``--apf manifests``: the burst under the manifests' API Priority and Fairness objects.

Why only ``manifests/access/flowcontrol.yaml`` and not the whole overlay: the question is
how the budget splits between Sandman's creates and binds (issue 14), and the FlowSchemas
match the accounts the benchmark's stack already runs as — the controller *and* the facade
use ``kubeconfig-sandman`` (``sandman-system/sandman-controller``, matched by
``sandman-binds``, ``sandman-election`` and ``sandman-workload``), the node agents
``sandman-system/sandman-node-agent`` (``sandman-agents``). The full overlay would add RBAC
and per-component tokens, which the devstack only grants to tenant ``dev``.

Why the lower bound reads the levels' budgets from /metrics: a level's rate is its share of
the server's budget over every level in effect (docs/simcluster.md), so the figure that
counts is the one simcluster resolved once the objects were applied, not one recomputed here.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import yaml

from devstack.manifests import ManifestsSettings, apply_file
from load.burst.analysis import parse_samples
from load.burst.settings import ProfileBudget

__all__ = ["FLOWCONTROL", "apply_flowcontrol", "sandman_levels", "shared_budget"]

#: The manifests' FlowSchemas and PriorityLevelConfigurations.
FLOWCONTROL = Path(__file__).resolve().parents[2] / "manifests" / "access" / "flowcontrol.yaml"
#: The accounts the burst's controller and facade run as (devstack's shared kubeconfig).
SANDMAN_ACCOUNTS = frozenset({("sandman-system", "sandman-controller"),
                              ("sandman-system", "sandman-facade")})  # fmt: skip


def sandman_levels(path: Path = FLOWCONTROL) -> set[str]:
    """The priority levels of the FlowSchemas that match the controller or the facade."""
    levels = set()
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc or doc.get("kind") != "FlowSchema":
            continue
        spec = doc["spec"]
        for rule in spec.get("rules") or []:
            for subject in rule.get("subjects") or []:
                sa = subject.get("serviceAccount") or {}
                if (sa.get("namespace"), sa.get("name")) in SANDMAN_ACCOUNTS:
                    levels.add(spec["priorityLevelConfiguration"]["name"])
    return levels


def shared_budget(budget: ProfileBudget, metrics_text: str, levels: set[str]) -> ProfileBudget:
    """``budget`` with the mutating rate the controller's and facade's levels get together
    (simcluster_flowcontrol_budget_requests_per_second), one second of it as the burst."""
    rates = {
        labels.get("priority_level", ""): value
        for name, labels, value in parse_samples(metrics_text)
        if name == "simcluster_flowcontrol_budget_requests_per_second"
        and labels.get("class") == "mutating"
    }
    if any(rates.get(lv, 0.0) <= 0 for lv in levels):
        return dataclasses.replace(budget, mutating_qps=math.inf, mutating_burst=0.0)
    total = sum(rates[lv] for lv in levels)
    return dataclasses.replace(budget, mutating_qps=total, mutating_burst=total)


async def apply_flowcontrol(admin_kubeconfig: Path, budget: ProfileBudget) -> None:
    """Apply the manifests' APF objects; refuse a profile whose own schema for Sandman's
    accounts would be tried first (profile schemas precede applied ones of equal
    precedence, so the manifests' ``sandman-binds`` would never match)."""
    if budget.mutating_qps < math.inf:
        raise RuntimeError(
            "--apf manifests needs a profile without a schema of its own for Sandman's "
            "accounts (it would match before the manifests' FlowSchemas): use "
            "--profile paper-burst-apf"
        )
    await apply_file(admin_kubeconfig, FLOWCONTROL, ManifestsSettings())
