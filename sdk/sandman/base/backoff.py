"""How long to wait before retry number *n*: exponential backoff, jitter, ``Retry-After``.

One definition for every retry loop in Sandman — the SDK's transport and batch loop, the
Kubernetes client, the informer's relist and rewatch, the binder's per-pod retry — so they
cannot disagree on what a ``Retry-After`` means or drift into a retry storm one by one. It
lives in :mod:`sandman.base`, beside the wire models at the bottom layer, because that is the
one place both the trainer's SDK and the server side (``kube``, ``controller``) may import.
It is pure (stdlib only, no clock, no event loop, no module state) and the caller passes its
random source, so a test can pin every draw.

**Ceilings.** Retry *n* (1-based) may wait up to ``min(cap_s, initial_s * multiplier**(n-1))``;
the ceilings never decrease, and ``cap_s`` bounds them however many retries there were.

**Jitter.** The delay is drawn below the ceiling, because clients that failed together
(a restarted API server, one 503 seen by a thousand trainers) must not retry together:

- ``full`` — uniform in ``[0, ceiling]``. The least total work for many competing clients
  and the fastest drain of contention (the AWS "Exponential Backoff And Jitter" analysis);
  right for the server side, where a controller's many requests compete for one API server
  and an early retry costs nothing but a rate-limit token.
- ``equal`` — uniform in ``[ceiling/2, ceiling]``. Keeps half the ceiling as a minimum wait,
  so a retry never comes back almost at once; right for the trainer SDK, whose callers are
  few per process and whose failures (a facade restarting, a 503) take a moment to clear.

**Retry-After is a floor.** A server that says "not before *t* seconds" is honoured: the
delay is never shorter than *t*. The floor is spread upwards by up to ``retry_after_spread``
(20%: the clients that received the same answer at the same moment then do not all come back
at the same instant), and the backoff still applies on top of it — the delay is the larger of
the jittered backoff and the spread floor. A ``Retry-After`` above ``max_retry_after_s`` is
clamped to it here; whether such an answer is worth waiting for at all is the caller's policy
(:meth:`Backoff.honours`: the SDK gives up and raises it, the Kubernetes client waits the
clamped time). Nonsense input (negative, NaN, infinite) never yields a negative or NaN delay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["Backoff", "Jitter", "RandomSource"]

Jitter = Literal["full", "equal"]


class RandomSource(Protocol):
    """What the helper needs of a random generator (``random.Random`` has it)."""

    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with jitter that honours ``Retry-After`` (module docstring)."""

    #: The ceiling of the first retry's delay, seconds (> 0).
    initial_s: float
    #: Each further retry multiplies the ceiling by this (>= 1).
    multiplier: float = 2.0
    #: No backoff ceiling exceeds this, seconds (> 0).
    cap_s: float = 30.0
    jitter: Jitter = "full"
    #: The longest ``Retry-After`` honoured; a longer one is clamped to it.
    max_retry_after_s: float = 60.0
    #: A ``Retry-After`` floor is stretched by up to this fraction (0 = wait exactly it).
    retry_after_spread: float = 0.2

    def __post_init__(self) -> None:
        values = (self.initial_s, self.multiplier, self.cap_s, self.max_retry_after_s,
                  self.retry_after_spread)  # fmt: skip
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise ValueError(f"backoff settings must be finite and >= 0: {self}")
        if self.initial_s <= 0 or self.cap_s <= 0:
            raise ValueError(f"a zero backoff is a hot loop: {self}")
        if self.multiplier < 1:
            raise ValueError(f"a backoff multiplier below 1 shrinks the delays: {self}")
        if self.jitter not in ("full", "equal"):
            raise ValueError(f"unknown jitter {self.jitter!r} (full or equal)")

    def ceiling(self, attempt: int) -> float:
        """The longest backoff before retry ``attempt`` (1-based; lower counts as 1)."""
        steps = max(attempt, 1) - 1
        if self.initial_s >= self.cap_s:
            return self.cap_s
        if self.multiplier == 1:
            return self.initial_s
        # Compare exponents, not powers: multiplier**steps overflows a float long before
        # ``attempt`` stops being a plausible (or hostile) input.
        if steps >= math.log(self.cap_s / self.initial_s, self.multiplier):
            return self.cap_s
        return min(self.cap_s, self.initial_s * self.multiplier**steps)

    def floor(self, retry_after: float | None) -> float:
        """The server's ``Retry-After`` as a lower bound: clamped to ``[0, max_retry_after_s]``."""
        if retry_after is None or math.isnan(retry_after) or retry_after <= 0:
            return 0.0
        return min(retry_after, self.max_retry_after_s)

    def honours(self, retry_after: float | None) -> bool:
        """Whether ``retry_after`` is a delay worth waiting (not above ``max_retry_after_s``)."""
        return retry_after is None or not retry_after > self.max_retry_after_s

    def delay(self, attempt: int, retry_after: float | None, rng: RandomSource) -> float:
        """Seconds to sleep before retry ``attempt`` (1-based), never shorter than the floor.

        Always in ``[floor, max(ceiling, floor * (1 + retry_after_spread))]``.
        """
        ceiling = self.ceiling(attempt)
        low = 0.0 if self.jitter == "full" else ceiling / 2
        backoff = min(ceiling, low + (ceiling - low) * _unit(rng))
        floor = self.floor(retry_after)
        if floor == 0:
            return backoff
        spread = floor * (1 + self.retry_after_spread * _unit(rng))
        return max(backoff, spread)


def _unit(rng: RandomSource) -> float:
    """One draw in ``[0, 1]`` whatever the generator returns (a broken one must not yield NaN)."""
    u = rng.random()
    return min(max(u, 0.0), 1.0) if not math.isnan(u) else 0.0
