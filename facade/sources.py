"""Sandbox sources: the interchangeable ways an order's members come to exist, tried in turn.

In the spirit of kube-scheduler's framework, where each bind plugin either binds a pod or
answers Skip and the next one is asked, a source is handed an order and answers with a
:class:`Supply`: the outcome of every member it took (written, or refused) and the members it
*left*, which the next source is handed. The facade's sources (facade/service.py lists them):

- **pre-placed** (facade/preplaced.py): the leading controller's placements, each create sent
  on its node within the placement's life; leaves what the leader could not place, groups,
  and what ran out twice;
- **unbound** (facade/unbound.py): ``schedulerName: sandman``, the binder binds — the last
  source, which takes every member it is handed.

Why this shape: a source only ever calls down (the pod writer, facade/writer.py, which
answers with data and never calls back), and what it leaves is data too, so a create flows
one way and a new source (the pools' "pooled", tried first) is one module that has
:meth:`SandboxSource.supply` and one line in the list — nothing else changes. A source that
cannot serve an order at all (a group, for pre-placed) leaves every member.

:func:`supply_in_turn` holds every source to the rule that makes the chain safe: each member
handed to a source is either answered by it or left, never both and never neither, and no
member is answered twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .order import Member, Order, Outcome

__all__ = ["SandboxSource", "Supply", "supply_in_turn"]


@dataclass(frozen=True, slots=True)
class Supply:
    """What a source did with an order."""

    #: By member index: the members it took, each written or refused.
    outcomes: Mapping[int, Outcome] = field(default_factory=dict)
    #: The members it left to the next source (as it left them: ``prepaid``, ``late``).
    left: tuple[Member, ...] = ()


class SandboxSource(Protocol):
    """One way to make an order's sandboxes exist (module docstring)."""

    async def supply(self, order: Order) -> Supply:
        """Write the members this source can serve; leave the others (all of them:
        ``Supply(left=order.members)``, for an order it cannot serve at all)."""
        ...


async def supply_in_turn(sources: Sequence[SandboxSource], order: Order) -> dict[int, Outcome]:
    """Every member's outcome: ``order`` handed to the first source, what it left to the
    next, and so on; the last source must leave nothing. Each member handed to a source must
    come back from it once, answered or left (a source that breaks this is a bug: raised)."""
    outcomes: dict[int, Outcome] = {}
    members = order.members
    for source in sources:
        if not members:
            break
        supply = await source.supply(Order(order.tenant, members, order.group))
        handed = sorted(m.index for m in members)
        returned = sorted([*supply.outcomes, *(m.index for m in supply.left)])
        if returned != handed:
            raise RuntimeError(
                f"{type(source).__name__} was handed members {handed} and answered or left "
                f"{returned}: each must be answered or left, once"
            )
        outcomes.update(supply.outcomes)
        members = supply.left
    if members:
        raise RuntimeError(f"no source supplied members {[m.index for m in members]}")
    return outcomes
