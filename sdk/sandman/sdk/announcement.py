"""``AsyncPreparation``: a trainer's announcement of images ahead of a burst.

``await client.prepare({image: sandboxes_expected, ...})`` sends ``POST /v1/prepare``; the
controller then has enough nodes pull each image that the expected sandboxes start without
waiting for a pull. A trainer announces step t+1's images while step t's rollouts run, and
before the burst awaits ``wait_ready(fraction=...)``: *ready enough*, not necessarily all —
a few sandboxes that must still pull cost less than an idle step. The handle polls
``GET /v1/prepare/{id}`` (the controller refreshes the progress every few seconds).
"""

from __future__ import annotations

import asyncio
import time

from sandman.wire.image_preparation import Preparation as PreparationView

from .errors import ClientReason, PreparationFailed, PreparationTimeout
from .transport import Transport

__all__ = ["AsyncPreparation"]

_ENDED = {
    "Invalid": ClientReason.PREPARATION_INVALID,
    "Expired": ClientReason.PREPARATION_EXPIRED,
}


class AsyncPreparation:
    """An announcement of images ahead of a burst, and its progress."""

    #: The announcement's progress as last fetched (``refresh``).
    view: PreparationView

    def __init__(self, transport: Transport, view: PreparationView) -> None:
        self._transport = transport
        self.view = view

    def __repr__(self) -> str:
        return f"<AsyncPreparation {self.id} {self.view.phase} {self.fraction_ready:.0%}>"

    @property
    def id(self) -> str:
        return self.view.id

    @property
    def fraction_ready(self) -> float:
        """Of the sandboxes announced, the share that can start at once on nodes holding
        their image (1.0 once the phase is Ready)."""
        if self.view.phase == "Ready":
            return 1.0
        expected = self.view.sandboxes_expected
        return min(self.view.sandboxes_ready / expected, 1.0) if expected else 0.0

    async def refresh(self) -> PreparationView:
        """Fetch the progress now (nodes ready per image, failures, ETA)."""
        self.view = await self._transport.request(
            "GET", f"/v1/prepare/{self.id}", PreparationView, idempotent=True
        )
        return self.view

    async def wait_ready(
        self, fraction: float = 1.0, *, timeout_s: float = 600.0, poll_s: float = 1.0
    ) -> AsyncPreparation:
        """Until at least ``fraction`` of the announced sandboxes can start on nodes that
        hold their image; raises ``PreparationTimeout`` when ``timeout_s`` passes first
        (the announcement keeps counting: waiting again is fine) and ``PreparationFailed``
        when it is Invalid or Expired."""
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], not {fraction}")
        deadline = time.monotonic() + timeout_s
        while self.fraction_ready < fraction:
            if self.view.phase in _ENDED:
                raise PreparationFailed(
                    f"preparation {self.id} is {self.view.phase}: {self.view.message or ''}",
                    reason=_ENDED[self.view.phase],
                    status=409,
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PreparationTimeout(
                    f"preparation {self.id}: {self.fraction_ready:.0%} ready after "
                    f"{timeout_s:g} s, wanted {fraction:.0%}",
                    reason=ClientReason.PREPARATION_TIMEOUT,
                    status=504,
                )
            await asyncio.sleep(min(poll_s, remaining))
            await self.refresh()
        return self
