"""How a blocking wrapper calls its async twin: one ``portal.call`` per method.

Every blocking class of the SDK (``sync``, ``sync_tools``) is a ``Bound``: it holds the
anyio blocking portal ``Sandman`` started and turns a coroutine into a call, an async
iterator into an iterator that is closed when the caller stops. ``twin_of`` gives each
blocking method its async twin's docstring. They sit apart from the wrappers so each wrapper
module stands on this one and neither imports the other for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from typing import Any, TypeVar

from anyio.from_thread import BlockingPortal

__all__ = ["Bound", "twin_of"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
_DONE = object()


def twin_of(async_method: Callable[..., Any]) -> Callable[[F], F]:
    """Give the decorated blocking method its async twin's docstring (its own signature is
    left alone, for type checkers and ``help()``)."""

    def adopt(method: F) -> F:
        method.__doc__ = async_method.__doc__
        return method

    return adopt


class Bound:
    """Something that calls async methods through a portal."""

    def __init__(self, portal: BlockingPortal) -> None:
        self._portal = portal

    def _call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        return self._portal.call(partial(fn, *args, **kwargs))

    def _iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        async def step() -> object:
            try:
                return await items.__anext__()
            except StopAsyncIteration:
                return _DONE

        try:
            while (item := self._portal.call(step)) is not _DONE:
                yield item  # type: ignore[misc]
        finally:
            aclose = getattr(items, "aclose", None)
            # RuntimeError: the client was closed first (its loop is gone, and the stream too).
            with contextlib.suppress(RuntimeError):
                if aclose is not None:
                    self._portal.call(aclose)
