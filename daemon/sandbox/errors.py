"""The daemon's one error type: every failure a caller can cause is a reason of the one table.

Handlers raise :class:`DaemonError` with a :class:`sandman.wire.errors.Reason`; the server
turns it into the wire model ``{"error": {"reason", "message"}}`` with the reason's status.
There is no subclass per status: the table says which status a reason is answered with (and
the SDK decodes it by the same row), so a raise site names what went wrong and nothing that
could disagree with it. Anything else escaping a handler is a bug and becomes a 500
``internal`` (logged, never crashing the daemon). Causes are chained (``raise ... from exc``)
so logs keep the origin.
"""

from __future__ import annotations

from sandman.base.errors import Failure
from sandman.wire.errors import REASON_HEADER, Reason

__all__ = ["DaemonError"]


class DaemonError(Failure):
    """An expected failure: ``message``, then its ``reason`` (the status comes from it).

    A 429's ``retry_after_s`` (1 s unless said) becomes its ``retry-after`` header."""

    reason: Reason

    def __init__(
        self,
        message: str,
        *,
        reason: Reason,
        retry_after_s: float | None = None,
    ) -> None:
        if retry_after_s is None and reason.status == 429:
            retry_after_s = 1
        super().__init__(
            message,
            reason=reason,
            status=reason.status,
            retriable=reason.retriable,
            retry_after_s=retry_after_s,
        )

    def headers(self) -> list[tuple[str, str]]:
        """The answer's headers; ``x-sandman-reason`` names the reason where no body is read
        (a refused WebSocket upgrade through a forwarded port, a HEAD)."""
        reason = [(REASON_HEADER, self.reason.value)]
        if self.status == 401:
            return [("www-authenticate", 'Bearer realm="sandman"'), *reason]
        if self.retry_after_s is not None:
            return [("retry-after", str(max(1, round(self.retry_after_s)))), *reason]
        return reason
