"""A create order: the rendered pods a request still has to create, and what became of each.

Why plain data: a create flows one way — request, admission, sandbox sources, pod writes,
answer (facade/create.py) — and what passes from one step to the next is an :class:`Order`
going down and an :class:`Outcome` per member coming back, never a callback into the step
above. A member knows what happened to it on the way (``prepaid``, ``late``) so that the next
source writes it as the one before would have: with the token already taken, counted as a
placement that ran out.

Why the outcomes are values and not exceptions: a batch answers each member on its own
(201 with ``failed`` members), so a refused create is an expected result of one member,
carried back as :class:`Refused` beside the others; only the answer decides whether it is
raised (a single create) or listed (a batch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kube.cache import Obj
from sandman.wire.facade import CreateSandbox, Sandbox

from .errors import FacadeError
from .tenancy import Tenant

__all__ = ["Member", "Order", "Outcome", "Pooling", "Refused", "Written", "concurrently"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Member:
    """One sandbox of an order: its index in the request and its rendered pod."""

    index: int
    pod: Obj
    #: Its create's token was taken already, by a source that asked for it and left it.
    prepaid: bool = False
    #: Its placement ran out before the create could be sent (counted ``unbound-late``).
    late: bool = False

    @property
    def name(self) -> str:
        """The pod's name: the sandbox id."""
        name: str = self.pod["metadata"]["name"]
        return name


@dataclass(frozen=True, slots=True)
class Pooling:
    """What the pooled source (facade/pooled.py) claims an order's sandboxes with: the
    request's spec and digest, and the claim's name (from its Idempotency-Key). Member ``i``
    of the request is the claim's ``i``-th pod."""

    spec: CreateSandbox
    digest: str
    claim: str
    #: Some members exist already: get the first request's claim back, claim nothing new.
    replay_only: bool = False


@dataclass(frozen=True, slots=True)
class Order:
    """The members of one request (or of a part of it) still to be created for ``tenant``."""

    tenant: Tenant
    members: tuple[Member, ...]
    #: A group's pods are placed all or nothing, by the binder (docs/facade.md, "Groups").
    group: str | None = None
    #: Offered to the pooled source first (None: not, e.g. the cold rest of a request).
    pooling: Pooling | None = None


@dataclass(frozen=True, slots=True)
class Written:
    """The member's pod is there: created now, or found created for the same request."""

    sandbox: Sandbox
    #: False: it existed (a retry of a create that landed).
    created: bool


@dataclass(frozen=True, slots=True)
class Refused:
    """The member was not created: ``error`` is its answer (a batch lists it as failed)."""

    error: FacadeError


#: What became of a member.
Outcome = Written | Refused


async def concurrently(calls: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """Run ``calls`` at once, their results in order; the first failure cancels the rest.

    Why not always a TaskGroup: most creates are single (an order of one member, one part,
    one write), and a task costs a loop turn and its scheduling at every step it is made
    for. One call is awaited in place; none costs nothing."""
    if len(calls) <= 1:
        return [await call for call in calls]
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(call) for call in calls]
    return [task.result() for task in tasks]
