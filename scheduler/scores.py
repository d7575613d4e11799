"""Scores: among feasible nodes, which is best? Each is 0-100, higher is better.

Why these three:

- *packing* (kube-scheduler's MostAllocated): fill the fullest node first, so sandboxes
  share nodes instead of fragmenting free space every other tenant could use, and empty nodes
  stay empty for the autoscaler. Measured after placing the pod, averaged over CPU and memory.
- *image locality*: a sandbox on a node that already holds its task image starts in ~1 s
  instead of ~20 s of pulling. Images come from ``node.status.images`` and from the set the
  node agent reports as prepared.
- *taint toleration*: PreferNoSchedule taints the pod does not tolerate lower the score
  (normalised against the worst feasible node, as kube-scheduler does) but never exclude.

The planner combines them with the non-negative weights in ``ScoreWeights``.
"""

from __future__ import annotations

from collections.abc import Collection

from scheduler.model import NodeInfo, PodShape, Resources

__all__ = ["image_locality", "most_allocated", "prefer_no_schedule_count", "taint_toleration"]


def most_allocated(alloc: Resources, cpu_after: int, memory_after: int) -> float:
    """Average fraction (0-100) of CPU and memory requested after placing the pod."""
    total = 0.0
    parts = 0
    if alloc.cpu > 0:
        total += min(cpu_after, alloc.cpu) / alloc.cpu
        parts += 1
    if alloc.memory > 0:
        total += min(memory_after, alloc.memory) / alloc.memory
        parts += 1
    return 100.0 * total / parts if parts else 0.0


def image_locality(pod: PodShape, images_on_node: Collection[str]) -> float:
    """Share (0-100) of the pod's images already present or prepared on the node."""
    if not pod.images:
        return 0.0
    present = sum(1 for image in pod.images if image in images_on_node)
    return 100.0 * present / len(pod.images)


def prefer_no_schedule_count(pod: PodShape, node: NodeInfo) -> int:
    """Number of PreferNoSchedule taints on the node that the pod does not tolerate."""
    return sum(
        1
        for taint in node.taints
        if taint.effect == "PreferNoSchedule"
        and not any(t.tolerates(taint) for t in pod.tolerations)
    )


def taint_toleration(count: int, worst: int) -> float:
    """100 for no intolerable PreferNoSchedule taints, down to 0 for the worst feasible node."""
    if worst <= 0:
        return 100.0
    return 100.0 * (1 - count / worst)
