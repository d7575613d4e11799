"""What a plan is: who goes where (:class:`Assignment`), who can go nowhere now and why
(:class:`Unschedulable`), and the rest of one batch's outcome (:class:`Plan`).

The controller binds the assignments and reports the unschedulable; nothing here decides
anything (that is ``engine.plan_batch`` and the placement loop), so the outcome's shape can
be read, and tested, on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["Assignment", "Plan", "Unschedulable"]


class Assignment(NamedTuple):
    """Pod ``uid`` goes to ``node`` (a named tuple: a plan holds thousands of them)."""

    uid: str
    node: str
    namespace: str = ""
    name: str = ""

    def binding(self) -> dict[str, Any]:
        """The body of ``POST /api/v1/namespaces/{namespace}/pods/{name}/binding``.

        ``metadata.uid`` makes the API server refuse the bind (409) if the pod was deleted
        and re-created under the same name since it was planned.
        """
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node},
        }


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """A pod no node can take now, with kube-scheduler's message and reason counts."""

    uid: str
    message: str
    reasons: tuple[tuple[str, int], ...]
    namespace: str = ""
    name: str = ""


@dataclass(frozen=True, slots=True)
class Plan:
    """The outcome of one batch: who goes where, and why the rest cannot go anywhere.

    Every assignment is already reserved in the assumed ledger (unless planned with
    ``reserve=False``); bind them, and ``forget`` the ones whose bind fails.
    """

    assignments: tuple[Assignment, ...]
    unschedulable: tuple[Unschedulable, ...] = ()
    #: Pods held back because every node's start queue is full (``defer_over_cap``).
    deferred: tuple[str, ...] = ()
    #: Pods not planned: already bound, already reserved, or listed twice.
    skipped: tuple[str, ...] = ()
    #: Number of equivalence classes the batch formed.
    classes: int = 0
    #: Objects that are not valid pods (uid, reason); the rest of the batch is planned.
    rejected: tuple[tuple[str, str], ...] = ()
    #: Members of groups waiting for the rest of their group (scheduler/gang.py): neither
    #: placed nor unschedulable yet; a later plan places them with the others.
    waiting: tuple[str, ...] = ()

    def by_node(self) -> dict[str, int]:
        """Pods assigned per node."""
        out: dict[str, int] = {}
        for a in self.assignments:
            out[a.node] = out.get(a.node, 0) + 1
        return out

    @property
    def nodes_used(self) -> int:
        return len(self.by_node())
