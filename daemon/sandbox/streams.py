"""Streamed response bodies that give back what they hold, whatever happens to the response.

A streamed answer (an exec's NDJSON events, a file's bytes) holds resources from the moment
its handler returns: a slot under the concurrent-command cap, an open file descriptor, an
in-flight count for the idle timeout. An async generator cannot be trusted to release them:
if the client goes away before the first chunk is pulled, closing a generator that never
started runs none of its ``finally`` blocks. That is how streamed execs once took their slot
only when their first chunk was produced, so twelve requests arriving together all passed a
cap of four. ``GuardedStream`` takes the resource *before* the response starts and releases
it exactly once: at the end of the stream, on an error, or on ``aclose`` (which the HTTP
server calls on every path, sent or not).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

__all__ = ["GuardedStream", "close_stream"]


class GuardedStream:
    """Chunks of ``source``; ``release`` runs exactly once, started or not."""

    def __init__(self, source: AsyncIterator[bytes], release: Callable[[], None]) -> None:
        self._source = source
        self._release: Callable[[], None] | None = release

    def __aiter__(self) -> GuardedStream:
        return self

    async def __anext__(self) -> bytes:
        if self._release is None:
            raise StopAsyncIteration
        try:
            return await self._source.__anext__()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        release, self._release = self._release, None
        if release is None:
            return
        try:
            await close_stream(self._source)
        finally:
            release()


async def close_stream(stream: object) -> None:
    """``aclose()`` an async iterator if it has one (generators and ``GuardedStream`` do)."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()
