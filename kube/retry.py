"""The one retry rule of the Kubernetes client layer, and the one loop that applies it.

Why one: the loop was written three times (``KubeClient.request``, its watch opening, and
``LightClient.request``) and the copies had drifted — ``HEAD`` was safe to repeat in one and
not in the other, the light client's watch was never retried, the aiohttp client's watch
never re-read a rotated token. A newcomer changing what is retried had three places to find.
Now both clients hand :func:`send_with_retries` one attempt and their own pacing, and every
decision is :class:`RetryRule`'s:

- **which requests are safe to repeat** (:meth:`RetryRule.is_safe`): the caller's word when it
  gives one (``idempotent=``: a bind with its uid precondition, a create with a name that
  makes a repeat an AlreadyExists), else the method — GET, HEAD, PUT, DELETE and PATCH are,
  POST is not;
- **which failures are worth another attempt** (:meth:`RetryRule.worth_retry`): a 429 always
  (the server did not run the request), a failure before the request was sent always, any
  other retriable failure (5xx, a timeout, a connection that broke after sending) only when
  the request is safe to repeat;
- **how long apart** (:meth:`RetryRule.delay`): :class:`sandman.base.backoff.Backoff`, the
  helper every Sandman retry loop uses — full jitter, and a 429's Retry-After as a floor
  (clamped to ``max_retry_after_s``, and then still waited: the API server knows its load);
- **how many times**: ``max_attempts`` attempts in all (1 = no retry).

A 401 is not a retry of the rule: the loop re-reads the credentials once (bound service
account tokens rotate) and sends again, without spending an attempt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from kube.errors import KubeError, TooManyRequests, TransportError, Unauthorized
from kube.settings import ClientSettings
from sandman.base.backoff import Backoff, RandomSource

__all__ = ["SAFE_METHODS", "RetryRule", "send_with_retries"]

T = TypeVar("T")

#: Methods whose repeat cannot do what the first attempt did not (RFC 9110's idempotent
#: methods that Kubernetes serves).
SAFE_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "PATCH"})


@dataclass(frozen=True, slots=True)
class RetryRule:
    """Which requests are repeated, after which failures, how far apart, how many times."""

    #: Attempts of one request in all (1 = no retry).
    max_attempts: int
    backoff: Backoff
    safe_methods: frozenset[str] = SAFE_METHODS

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1 (1 = no retry)")

    @classmethod
    def for_client(cls, settings: ClientSettings) -> RetryRule:
        """The rule of a client with these settings (both clients build theirs here)."""
        return cls(max_attempts=settings.max_attempts, backoff=settings.backoff)

    def is_safe(self, method: str, idempotent: bool | None = None) -> bool:
        """Whether the request may be repeated after it may have run: the caller's word
        (``idempotent``) when given, else the method's."""
        return method in self.safe_methods if idempotent is None else idempotent

    def worth_retry(self, error: KubeError, safe: bool) -> bool:
        """Whether another attempt may succeed and cannot do harm."""
        if isinstance(error, TooManyRequests):
            return True
        if isinstance(error, TransportError) and not error.sent:
            return True
        return safe and error.retriable

    def delay(self, error: KubeError, attempt: int, safe: bool, rng: RandomSource) -> float | None:
        """Seconds to wait after failed attempt ``attempt`` (1-based) before the next one, or
        None to give up (the attempts are spent, or the failure is not worth a retry)."""
        if attempt >= self.max_attempts or not self.worth_retry(error, safe):
            return None
        return self.backoff.delay(attempt, error.retry_after_s, rng)


async def send_with_retries(
    rule: RetryRule,
    attempt: Callable[[], Awaitable[T]],
    *,
    safe: bool,
    rng: RandomSource,
    pace: Callable[[], Awaitable[object]],
    reauthenticate: Callable[[], Awaitable[object]] | None = None,
) -> T:
    """``attempt()`` until it returns, as ``rule`` says; the last failure is raised.

    ``pace`` is awaited before every attempt (the client's token bucket); ``reauthenticate``
    (None: a 401 is final) re-reads the credentials after the first 401."""
    failures = 0
    reauthenticated = False
    while True:
        await pace()
        try:
            return await attempt()
        except Unauthorized:
            if reauthenticate is None or reauthenticated:
                raise
            reauthenticated = True
            await reauthenticate()
        except KubeError as e:
            failures += 1
            wait = rule.delay(e, failures, safe, rng)
            if wait is None:
                raise
            await asyncio.sleep(wait)
