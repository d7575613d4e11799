"""A batch of pending pods as the units the placement loop places: classes and groups.

How a plan stays fast (the reference burst is 11,858 pods at once) starts here:

1. *Equivalence classes.* Sandboxes of one task are identical, so pods are grouped by
   :class:`PodShape` (requests, tolerations, selectors, images, priority): filters, slot
   counts and scores are a class's, not a pod's.
2. *Groups.* Classes that differ only in their images form a *group*: feasibility and slot
   counts do not depend on the image, so they run once per (group, node), not once per
   image (a burst may span hundreds of task images). The placement loop
   (``placement_loop.py``) judges the nodes once per group and ranks them in heaps.

Groups are placed in an order that packs well: higher priority first, then bigger pods
first (first-fit-decreasing), then first seen. (A *group* here is classes sharing a shape;
a *gang*, ``gang.py``, is sandboxes a trainer asked to be placed all or nothing.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.cluster import ClusterModel
from scheduler.model import Pod, PodShape

__all__ = ["Classes", "Group", "equivalence_classes", "placement_groups"]

#: Pods by their shape, in first-seen order.
Classes = dict[PodShape, list[Pod]]
#: A group's shape without images, and its classes in first-seen order.
Group = tuple[PodShape, list[tuple[PodShape, list[Pod]]]]


def equivalence_classes(
    model: ClusterModel, pending: Iterable[Pod | Mapping[str, Any]]
) -> tuple[Classes, list[str], list[tuple[str, str]]]:
    """Equivalence classes in first-seen order, the uids to skip (already bound, already
    reserved, listed twice), and the objects that are no valid pods, with the reason."""
    classes: Classes = {}
    skipped: list[str] = []
    rejected: list[tuple[str, str]] = []
    seen: set[str] = set()
    held, reserved = model.placed_uids()
    decode = model.decoder.pod
    for item in pending:
        if item.__class__ is Pod:
            pod: Pod = item
        else:
            try:
                pod = decode(item)  # type: ignore[arg-type]
            except (ValueError, KeyError, TypeError, AttributeError) as err:
                rejected.append((_uid_of(item), f"invalid pod: {err!s}"))
                continue
        uid = pod.uid
        if uid in seen or uid in held or uid in reserved or pod.node_name is not None:
            skipped.append(uid)
            continue
        seen.add(uid)
        group = classes.get(pod.shape)
        if group is None:
            group = classes[pod.shape] = []
        group.append(pod)
    return classes, skipped, rejected


def _uid_of(obj: object) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return "?"
    return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")


def placement_groups(model: ClusterModel, classes: Classes) -> list[Group]:
    """Classes grouped by everything but their images, in placement order: higher priority
    first, then bigger pods first (first-fit-decreasing packs well), then first seen."""
    cpu = sum(n.allocatable.cpu for n in model.nodes.values()) or 1
    mem = sum(n.allocatable.memory for n in model.nodes.values()) or 1
    groups: dict[PodShape, list[tuple[PodShape, list[Pod]]]] = {}
    for shape, pods in classes.items():
        base = (
            PodShape(
                shape.requests,
                shape.tolerations,
                shape.node_selector,
                shape.affinity,
                (),
                shape.priority,
            )
            if shape.images
            else shape
        )
        groups.setdefault(base, []).append((shape, pods))

    def order(item: tuple[int, PodShape]) -> tuple[int, float, int]:
        first, base = item
        req = base.requests
        return (-base.priority, -max(req.cpu / cpu, req.memory / mem), first)

    ordered = sorted(enumerate(groups), key=order)
    return [(base, groups[base]) for _, base in ordered]
