"""Waiting for a condition: the suite's one polling helper, for sync and async tests.

The system under test is made of processes, watches and background tasks, so tests wait all
the time: for a pod to be Ready, a daemon to exit, a watch event to reach a cache. There is
one helper for it, instead of one per test folder and a deadline loop per test, so that every
wait means the same thing and fails the same readable way:

- the condition is polled every ``interval_s`` (short: waits end soon after the condition
  becomes true, so the suite is fast on a fast machine) until ``timeout_s`` has passed
  (generous: a loaded 2-core CI machine still passes), and it is checked once more at the
  deadline, so a condition that became true while the helper slept is not reported as missed;
- on timeout it raises :class:`WaitTimeout`, an ``AssertionError`` that says what was awaited
  (``what``, or the condition's own source text), for how long, how often it was checked,
  and the last value or exception the condition gave, chained as the cause.

A condition is a callable without arguments. Its first truthy result is returned, so a wait
can hand back what it waited for (``pod = wait_until(lambda: find_ready(name))``). Until
then it may return something falsy or raise ``AssertionError``, which lets a condition use
plain ``assert`` statements whose messages end up in the timeout's report. Any other
exception is a bug, not "not yet", and propagates at once, unless its type is listed in
``retry`` (say, a connection refused while a server starts).

:func:`wait_until_async` also accepts conditions that return an awaitable (an ``async def``
function, or a lambda calling one) and awaits it; each check is bounded by the time left
(at least ``HUNG_CHECK_GRACE_S``), so a check that hangs still ends in a readable timeout.
It uses anyio, so it works in anyio tests and in plain asyncio code alike.

Sleeping stays right only where the passing of time is what a test is about ("idle longer
than the timeout, then check it exited"); such a sleep says so in a comment.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

import anyio

__all__ = [
    "DEFAULT_INTERVAL_S",
    "DEFAULT_TIMEOUT_S",
    "HUNG_CHECK_GRACE_S",
    "WaitTimeout",
    "describe",
    "wait_until",
    "wait_until_async",
]

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_INTERVAL_S = 0.02
#: The least time one check of an async condition gets before it counts as hung.
HUNG_CHECK_GRACE_S = 1.0
_MAX_REPR = 600


class WaitTimeout(AssertionError):
    """A condition did not become true in time; ``last`` is its last result (or exception)."""

    def __init__(self, message: str, last: object) -> None:
        super().__init__(message)
        self.last = last


class _Poll:
    """The bookkeeping shared by both variants: deadline, attempts, last outcome."""

    def __init__(
        self,
        condition: Callable[[], object],
        timeout_s: float,
        interval_s: float,
        what: str | None,
        retry: tuple[type[BaseException], ...],
    ) -> None:
        if timeout_s < 0 or interval_s <= 0:
            raise ValueError(f"timeout_s={timeout_s} must be >= 0 and interval_s={interval_s} > 0")
        self.condition = condition
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.what = what
        self.retry = (AssertionError, *retry)
        self.started = time.monotonic()
        self.deadline = self.started + timeout_s
        self.attempts = 0
        self.last: object = None
        self.last_error: BaseException | None = None

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def pause(self) -> float:
        return max(0.0, min(self.interval_s, self.remaining()))

    def failed(self, error: BaseException) -> None:
        self.last, self.last_error = error, error

    def timeout(self) -> WaitTimeout:
        what = self.what or describe(self.condition)
        elapsed = time.monotonic() - self.started
        if self.last_error is not None:
            last = f"it last raised {_short(self.last_error)}"
        else:
            last = f"it last returned {_short(self.last)}"
        message = (
            f"timed out after {elapsed:.1f} s (timeout {self.timeout_s:g} s, "
            f"{self.attempts} checks) waiting for {what}; {last}"
        )
        return WaitTimeout(message, self.last)


def wait_until(
    condition: Callable[[], T],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = DEFAULT_INTERVAL_S,
    what: str | None = None,
    retry: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``condition`` until it returns something truthy, and return that.

    Blocks the calling thread: for synchronous tests (in an async test use
    :func:`wait_until_async`, which lets the event loop run while it waits)."""
    poll = _Poll(condition, timeout_s, interval_s, what, retry)
    while True:
        poll.attempts += 1
        try:
            value = condition()
        except poll.retry as e:
            poll.failed(e)
        else:
            if inspect.isawaitable(value):
                _close(value)
                raise TypeError(
                    f"{describe(condition)} returned an awaitable: use wait_until_async"
                )
            if value:
                return value
            poll.last, poll.last_error = value, None
        if poll.remaining() <= 0:
            raise poll.timeout() from poll.last_error
        time.sleep(poll.pause())


@overload
async def wait_until_async(
    condition: Callable[[], Awaitable[T]],
    *,
    timeout_s: float = ...,
    interval_s: float = ...,
    what: str | None = ...,
    retry: tuple[type[BaseException], ...] = ...,
) -> T: ...


@overload
async def wait_until_async(
    condition: Callable[[], T],
    *,
    timeout_s: float = ...,
    interval_s: float = ...,
    what: str | None = ...,
    retry: tuple[type[BaseException], ...] = ...,
) -> T: ...


async def wait_until_async(
    condition: Callable[[], Any],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = DEFAULT_INTERVAL_S,
    what: str | None = None,
    retry: tuple[type[BaseException], ...] = (),
) -> Any:
    """:func:`wait_until` for async tests: sleeps without blocking the event loop, and awaits
    the condition's result when it is awaitable."""
    poll = _Poll(condition, timeout_s, interval_s, what, retry)
    while True:
        poll.attempts += 1
        bound = max(poll.remaining(), HUNG_CHECK_GRACE_S)
        checked = False
        try:
            with anyio.move_on_after(bound):
                value = condition()
                if inspect.isawaitable(value):
                    value = await value
                checked = True
        except poll.retry as e:
            poll.failed(e)
        else:
            if not checked:
                poll.failed(TimeoutError(f"one check did not finish within {bound:.1f} s"))
            elif value:
                return value
            else:
                poll.last, poll.last_error = value, None
        if poll.remaining() <= 0:
            raise poll.timeout() from poll.last_error
        await anyio.sleep(poll.pause())


def describe(condition: Callable[..., object]) -> str:
    """What a condition checks, for a timeout message: a lambda's source text, else the
    function's name, with where it is defined."""
    code = getattr(condition, "__code__", None)
    name = getattr(condition, "__qualname__", None)
    if code is None or name is None:
        return repr(condition)
    where = f"{_relative(code.co_filename)}:{code.co_firstlineno}"
    if getattr(condition, "__name__", "") != "<lambda>":
        return f"{name}() ({where})"
    return f"{_lambda_source(code) or 'a lambda'} ({where})"


def _relative(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


@functools.lru_cache(maxsize=64)
def _parsed(filename: str) -> tuple[str, ast.Module] | None:
    source = "".join(linecache.getlines(filename))
    try:
        return source, ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def _lambda_source(code: Any) -> str | None:
    """The text of the lambda compiled to ``code``: among the lambdas on its first line, the
    one starting last at or before the first column its body's code comes from."""
    parsed = _parsed(code.co_filename)
    if parsed is None:
        return None
    source, tree = parsed
    line = code.co_firstlineno
    lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == line]
    columns = [  # where the body's instructions come from (zero-width ones are bookkeeping)
        col
        for ln, _, col, end in code.co_positions()
        if ln == line and col is not None and end is not None and end > col
    ]
    if columns:
        before = [n for n in lambdas if n.col_offset <= min(columns)]
        lambdas = before or lambdas
    if not lambdas:
        return None
    node = max(lambdas, key=lambda n: n.col_offset)
    text = ast.get_source_segment(source, node)
    return None if text is None else _clip(" ".join(text.split()), 200)


def _short(value: object) -> str:
    if isinstance(value, BaseException):
        return _clip(f"{type(value).__name__}: {value}", _MAX_REPR)
    try:
        text = repr(value)
    except Exception as e:  # a broken __repr__ must not hide the timeout
        text = f"<unrepresentable {type(value).__name__}: {e}>"
    return _clip(text, _MAX_REPR)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _close(value: object) -> None:
    close = getattr(value, "close", None)
    if callable(close):
        close()  # no "coroutine was never awaited" warning on top of the TypeError
