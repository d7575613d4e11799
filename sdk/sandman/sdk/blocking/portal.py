"""How a blocking object drives its async twin: one ``portal.call`` per method.

The blocking SDK is not a second implementation: every behaviour (retries, typed errors,
lease renewal, release on exit) lives once, in the async classes. ``Sandman`` starts an anyio
blocking portal — an event loop in a background thread — and each blocking method hands its
async twin's coroutine to that loop and waits for the result, so the lease keeps being
renewed by the loop while the trainer's thread computes. Async iterators (``list``,
``exec_stream``) are driven one item per call, and closed when the caller stops iterating.

The blocking classes themselves are generated from the async ones (``codegen.blocking``);
this module is what they stand on, written by hand: ``Bound`` (a portal and the async object
it drives) and ``PortalOwner`` (the one the trainer constructs, which starts the portal and
stops it when closed).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar, cast

from anyio.from_thread import BlockingPortal, start_blocking_portal

__all__ = ["Bound", "PortalOwner"]

A = TypeVar("A")
B = TypeVar("B", bound="Bound[Any]")
T = TypeVar("T")
_DONE = object()


class Bound(Generic[A]):
    """A blocking object: calls the methods of its async twin through a portal."""

    def __init__(self, portal: BlockingPortal, twin: A) -> None:
        self._portal = portal
        self._async = twin

    def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call()`` (a coroutine of the twin) on the portal's loop; its result."""
        return self._portal.call(call)

    def _iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        async def step() -> object:
            try:
                return await items.__anext__()
            except StopAsyncIteration:
                return _DONE

        try:
            while (item := self._portal.call(step)) is not _DONE:
                yield cast(T, item)
        finally:
            aclose = getattr(items, "aclose", None)
            # RuntimeError: the client was closed first (its loop is gone, and the stream too).
            with contextlib.suppress(RuntimeError):
                if aclose is not None:
                    self._portal.call(aclose)

    def _wrap(self, cls: type[B], twin: Any) -> B:
        """The blocking object for ``twin``: this one for its own twin (a method returning
        ``self`` returns the same blocking object), else a new ``cls`` on the same portal."""
        if twin is self._async:
            return cast(B, self)
        return cls(self._portal, twin)


class PortalOwner(Bound[A]):
    """A blocking object the trainer constructs: it starts the portal every object it hands
    out shares, and stops it when it is closed."""

    def __init__(self, twin: A) -> None:
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = start_blocking_portal()
        super().__init__(self._portal_cm.__enter__(), twin)

    def _enter(self, call: Callable[[], Awaitable[T]]) -> T:
        """``_call``, stopping the portal if it fails (no ``__exit__`` will follow)."""
        try:
            return self._call(call)
        except BaseException:
            self._stop_portal()
            raise

    def _finish(self, call: Callable[[], Awaitable[None]]) -> None:
        """``_call`` a closing coroutine, then stop the portal; closed already: nothing."""
        if self._portal_cm is None:
            return
        try:
            self._call(call)
        finally:
            self._stop_portal()

    def _stop_portal(self) -> None:
        portal_cm, self._portal_cm = self._portal_cm, None
        if portal_cm is not None:
            portal_cm.__exit__(None, None, None)
