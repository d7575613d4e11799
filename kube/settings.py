"""Client settings: timeouts, connection limits, the client-side rate limit and retries.

Why explicit: kr8s (httpx) defaults to no timeout at all, and an unbounded client can hang a
controller on one stuck request or flood a shared API server. Every knob has a value chosen
for a controller talking to one kube-apiserver; tests shrink them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kube.ratelimit import PacerSettings
from sandman.wire.backoff import Backoff

__all__ = ["ClientSettings", "Timeouts"]


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds. ``request`` bounds a whole non-watch request (connect + send + read)."""

    connect: float = 5.0
    request: float = 30.0
    #: A watch stream with no bytes (no event, no bookmark) for this long is dead.
    watch_idle: float = 120.0

    def __post_init__(self) -> None:
        if min(self.connect, self.request, self.watch_idle) <= 0:
            raise ValueError("timeouts must be > 0")


@dataclass(frozen=True, slots=True)
class ClientSettings:
    timeouts: Timeouts = Timeouts()
    #: Connections kept to the API server (HTTP/1.1: one request in flight each).
    max_connections: int = 100
    #: Client-side token bucket: sustained requests/s and burst (0 = unlimited). Watches
    #: are long-lived and not counted after they start.
    qps: float = 200.0
    burst: int = 400
    #: The bucket's rate follows the server's answers (AIMD, kube/ratelimit.py) below
    #: ``qps``, the ceiling.
    pacer: PacerSettings = field(default_factory=PacerSettings)
    #: Attempts of a request that is safe to repeat (1 = no retry).
    max_attempts: int = 5
    #: Exponential backoff between attempts, full jitter: retry n waits up to
    #: ``backoff_base * 2**(n-1)``, capped at ``backoff_cap`` (:class:`Backoff`).
    backoff_base: float = 0.1
    backoff_cap: float = 5.0
    #: Longest Retry-After honoured; a larger value is capped to it (and still waited).
    max_retry_after: float = 30.0
    user_agent: str = "sandman-controller/0.1"

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.max_attempts < 1:
            raise ValueError("max_connections and max_attempts must be >= 1")
        if self.qps < 0 or self.burst < 0:
            raise ValueError("qps and burst must be >= 0")
        if self.qps > 0 and self.burst < 1:
            raise ValueError("burst must be >= 1 when qps is set")
        self.backoff  # noqa: B018 - validates the backoff values now, not at the first retry

    @property
    def backoff(self) -> Backoff:
        """The delays between attempts (the one helper every Sandman retry loop uses)."""
        return Backoff(
            initial_s=self.backoff_base,
            cap_s=self.backoff_cap,
            jitter="full",
            max_retry_after_s=self.max_retry_after,
        )
