"""Execs kept for re-attachment: a tool call that survives a broken connection.

A trainer whose connection drops mid-exec cannot tell whether its command ran, so it cannot
safely send it again. An exec that carries an ``id`` is therefore run on the daemon's own
task, not the request's, and what it produces is kept here while it runs and for
``exec_retention_s`` after it ends: the same request under the same id *re-attaches* (waits
for the one result, or resumes a stream after the output events the caller already has)
instead of running the command again. A different request under a kept id is refused, 409
``exec_id_reused``: an id names one command.

What is kept is bounded, in count (``max_retained_execs``) and in bytes
(``max_retained_exec_bytes``, a stream's event lines or a result's output): past either bound
the oldest *ended* records are dropped first. A running exec is never dropped (there are at
most ``max_concurrent_execs`` of them, each bounded by its own output cap). Past the window an
id is free again and a request under it runs anew.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import msgspec

from sandman.wire.daemon import ExecRequest, ExecResult
from sandman.wire.errors import Reason

from .errors import DaemonError
from .settings import DaemonSettings

__all__ = ["RetainedExec", "RetainedExecs", "fingerprint"]


def fingerprint(request: ExecRequest, streaming: bool) -> bytes:
    """What makes two requests the same call: the decoded request (so spacing and key order
    of the JSON do not matter) and whether it streams."""
    encoded = msgspec.json.encode(request, order="sorted")
    return hashlib.sha256(b"stream:" + encoded if streaming else b"run:" + encoded).digest()


@dataclass(slots=True, eq=False)
class RetainedExec:
    """One kept exec: its result once there is one, and a stream's event lines as they come
    (stdout/stderr events, then the exit event; the start event is made per reader)."""

    id: str
    fingerprint: bytes
    streaming: bool
    result: asyncio.Future[ExecResult]
    lines: list[bytes] = field(default_factory=list)
    size: int = 0
    ended_at: float | None = None
    readers: int = 0
    _changed: asyncio.Future[None] | None = None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def append(self, line: bytes) -> None:
        self.lines.append(line)
        self.size += len(line)
        self._wake()

    def finish(self, result: ExecResult) -> None:
        if not self.result.done():
            self.result.set_result(result)
        if not self.streaming:
            self.size += len(result.stdout.data) + len(result.stderr.data)
        self.ended_at = time.monotonic()
        self._wake()

    def fail(self, exc: BaseException) -> None:
        """The exec could not produce a result (daemon shutdown): waiters get ``exc``."""
        if not self.result.done():
            self.result.set_exception(exc)
            self.result.exception()  # retrieved: no "never retrieved" warning if none waits
        self.ended_at = time.monotonic()
        self._wake()

    async def changed(self) -> None:
        """Return once a line is added or the exec ends (never cancels the shared future)."""
        if self._changed is None:
            self._changed = asyncio.get_running_loop().create_future()
        await asyncio.wait({self._changed})

    def _wake(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        self._changed = None

    def check_resume(self, position: int) -> None:
        produced = len(self.lines) - (1 if self.ended and self.lines else 0)  # not the exit
        if position > produced:
            raise DaemonError(
                f"resume_from {position} is past the {produced} output events of {self.id!r}",
                reason=Reason.RESUME_PAST_END,
            )


class RetainedExecs:
    """The kept execs by id, oldest first."""

    def __init__(self, settings: DaemonSettings) -> None:
        self._settings = settings
        self._records: OrderedDict[str, RetainedExec] = OrderedDict()

    def __len__(self) -> int:
        return len(self._records)

    @property
    def size(self) -> int:
        return sum(r.size for r in self._records.values())

    def find(self, request: ExecRequest, streaming: bool) -> RetainedExec | None:
        """The record to re-attach to, None if the id is free; 409 if it names another call."""
        self._expire()
        assert request.id is not None
        record = self._records.get(request.id)
        if record is None:
            return None
        if record.fingerprint != fingerprint(request, streaming):
            how = "a streamed" if record.streaming else "a"
            raise DaemonError(
                f"exec id {request.id!r} was used by {how} different request"
                f" (kept {self._settings.exec_retention_s:g} s after it ends)",
                reason=Reason.EXEC_ID_REUSED,
            )
        return record

    def add(self, request: ExecRequest, streaming: bool) -> RetainedExec:
        assert request.id is not None
        self._expire()
        self._make_room()
        future: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()
        record = RetainedExec(request.id, fingerprint(request, streaming), streaming, future)
        self._records[request.id] = record
        return record

    def _expire(self) -> None:
        horizon = time.monotonic() - self._settings.exec_retention_s
        for exec_id, record in list(self._records.items()):
            if record.ended_at is not None and record.ended_at < horizon:
                del self._records[exec_id]

    def _make_room(self) -> None:
        """Drop ended records, oldest first, until one more fits the count and the bytes."""
        max_count = self._settings.max_retained_execs
        max_bytes = self._settings.max_retained_exec_bytes
        size = self.size
        for exec_id, record in list(self._records.items()):
            if len(self._records) < max_count and size <= max_bytes:
                return
            if record.ended:
                size -= record.size
                del self._records[exec_id]
