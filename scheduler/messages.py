"""The "0/400 nodes are available: ..." message, in kube-scheduler's exact format.

Why the exact format: the controller writes it into the pod's PodScheduled condition, where
users, dashboards and alerting rules already parse kube-scheduler's wording. kube-scheduler
(``FitError.Error()``) counts every reason of every node's failing status, renders each as
"<count> <reason>", sorts those strings bytewise and joins them with ", ".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from scheduler.model import Status

__all__ = ["reason_histogram", "unschedulable_message"]

NO_NODES = "no nodes available to schedule pods"


def reason_histogram(statuses: Iterable[Status]) -> dict[str, int]:
    """How many nodes gave each reason (a node can give several, e.g. cpu and memory)."""
    counts: Counter[str] = Counter()
    for status in statuses:
        counts.update(status.reasons)
    return dict(sorted(counts.items()))


def unschedulable_message(total_nodes: int, histogram: dict[str, int]) -> str:
    """Render a reason histogram like kube-scheduler's FitError."""
    if total_nodes == 0:
        return NO_NODES
    message = f"0/{total_nodes} nodes are available:"
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    if parts:
        message += f" {', '.join(parts)}."
    return message
