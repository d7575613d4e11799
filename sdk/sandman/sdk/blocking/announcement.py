# Generated from sandman/sdk/announcement.py by `make generate` (codegen): do not edit.
"""The blocking twin of :mod:`sandman.sdk.announcement`: Preparation.

Each method is one call of its async twin through the portal
(:mod:`sandman.sdk.blocking.portal`); generated from the async source by ``codegen.blocking``.
"""

from __future__ import annotations

from sandman.sdk.announcement import AsyncPreparation
from sandman.sdk.blocking.portal import Bound
from sandman.wire.image_preparation import Preparation as PreparationView

__all__ = ["Preparation"]


class Preparation(Bound[AsyncPreparation]):
    """Blocking twin of :class:`sandman.sdk.announcement.AsyncPreparation`.

    An announcement of images ahead of a burst, and its progress."""

    @property
    def async_preparation(self) -> AsyncPreparation:
        """The async object this one drives."""
        return self._async

    @property
    def view(self) -> PreparationView:
        """The announcement's progress as last fetched (``refresh``)."""
        return self._async.view

    def __repr__(self) -> str:
        return repr(self._async).replace("<Async", "<", 1)

    @property
    def id(self) -> str:
        return self._async.id

    @property
    def fraction_ready(self) -> float:
        """Of the sandboxes announced, the share that can start at once on nodes holding
        their image (1.0 once the phase is Ready)."""
        return self._async.fraction_ready

    def refresh(self) -> PreparationView:
        """Fetch the progress now (nodes ready per image, failures, ETA)."""
        return self._call(lambda: self._async.refresh())

    def wait_ready(
        self, fraction: float = 1.0, *, timeout_s: float = 600.0, poll_s: float = 1.0
    ) -> Preparation:
        """Until at least ``fraction`` of the announced sandboxes can start on nodes that
        hold their image; raises ``PreparationTimeout`` when ``timeout_s`` passes first
        (the announcement keeps counting: waiting again is fine) and ``PreparationFailed``
        when it is Invalid or Expired."""
        return self._wrap(
            Preparation,
            self._call(
                lambda: self._async.wait_ready(fraction, timeout_s=timeout_s, poll_s=poll_s)
            ),
        )
