"""A batch's members: created concurrently, each outcome into its slot of the results, the
first member alone before the others, and pre-placed batches in parts of the send window.

Why its own module: the rules below are about a batch as a whole — what the idempotency
check needs, how many creates may be unanswered at once, which members are asked for again —
while facade/service.py creates one pod (:class:`CreatePod`) and knows nothing of them:

- **The first member alone.** If another replica created it for another request (not in our
  cache yet), the whole batch is refused (409 ``idempotency_key_reused``) before any other
  member exists. It is never asked for again when its placement runs out: it goes unbound.
- **Parts of the window.** A pre-placed batch larger than the send window's capacity
  (facade/window.py) is asked for and sent in parts of at most that many, the part with the
  first member before the others: a batch of 100 where the server queues 50 would have the
  rest answered 429 (docs/benchmarks/burst.md, window17).
- **The second ask.** Members whose placement ran out before their create could be sent are
  asked for again in one call (facade/preplace.py), then created on the new answer or unbound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Protocol

from kube.cache import Obj
from kube.placement import Placement
from sandman.wire.facade import BatchFailure, Sandbox

from .errors import FacadeError
from .preplace import PlacementRanOut, PrePlacement

__all__ = ["BatchMembers", "CreatePod", "Results"]

#: A batch's outcome per member index (None: not created by this call yet).
Results = list[Sandbox | BatchFailure | None]


class CreatePod(Protocol):
    """One pod's create (facade/service.py): pre-placed on ``placement`` when ``fast``, and
    ``last`` False raises :class:`PlacementRanOut` rather than going unbound."""

    def __call__(
        self, pod: Obj, placement: Placement | None, *, fast: bool, last: bool
    ) -> Awaitable[Sandbox]: ...


class BatchMembers:
    """Create ``pods`` (member index -> pod) of a batch whose pod names are ``ids``."""

    def __init__(
        self, create_pod: CreatePod, namespace: str, ids: list[str], results: Results
    ) -> None:
        self.create_pod = create_pod
        self.namespace = namespace
        self.ids = ids
        self.results = results

    async def unbound(self, pods: dict[int, Obj], concurrency: int) -> None:
        """Every member unbound (binder mode, gangs), at most ``concurrency`` at once."""
        await self._create(pods, None, asyncio.Semaphore(concurrency), first_alone=True)

    async def preplaced(self, pods: dict[int, Obj], fast: PrePlacement) -> None:
        """Through the send window in parts of at most its capacity, each asked for and sent
        on its own; the first part, with the member created alone, before the others."""
        items, size = list(pods.items()), fast.capacity()
        parts = [dict(items[i : i + size]) for i in range(0, len(items), size)]

        async def send(part: dict[int, Obj], first: bool) -> None:
            async with fast.sending(len(part)):
                limit = asyncio.Semaphore(len(part))
                await self._create(part, fast, limit, first_alone=first)

        await send(parts[0], True)
        async with asyncio.TaskGroup() as tg:
            for part in parts[1:]:
                tg.create_task(send(part, False))

    async def _create(
        self,
        pods: dict[int, Obj],
        fast: PrePlacement | None,
        limit: asyncio.Semaphore,
        *,
        first_alone: bool,
    ) -> None:
        ids = self.ids
        placements = await fast.place(self.namespace, pods) if fast is not None else {}
        late: dict[int, Obj] = {}

        async def one(i: int, placement: Placement | None, last: bool) -> None:
            async with limit:
                try:
                    self.results[i] = await self.create_pod(
                        pods[i], placement, fast=fast is not None, last=last
                    )
                except PlacementRanOut:
                    late[i] = pods[i]
                except FacadeError as e:
                    self.results[i] = _failure(i, e)

        todo = list(pods)
        if first_alone:
            await one(todo[0], placements.get(ids[todo[0]]), last=True)
            first = self.results[todo[0]]
            if isinstance(first, BatchFailure) and first.reason == "idempotency_key_reused":
                raise FacadeError(first.status, first.reason, first.message)
            todo = todo[1:]
        async with asyncio.TaskGroup() as tg:
            for i in todo:
                tg.create_task(one(i, placements.get(ids[i]), last=False))
        if late and fast is not None:
            again = await fast.place(self.namespace, late)
            async with asyncio.TaskGroup() as tg:
                for i in late:
                    tg.create_task(one(i, again.get(ids[i]), last=True))


def _failure(index: int, e: FacadeError) -> BatchFailure:
    return BatchFailure(
        index=index,
        reason=e.reason,
        message=e.message,
        status=e.status,
        retry_after_s=e.retry_after_s,
    )
