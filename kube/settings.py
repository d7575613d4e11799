"""Client settings: timeouts, connection limits, the client-side rate limit and retries.

Why explicit: kr8s (httpx) defaults to no timeout at all, and an unbounded client can hang a
controller on one stuck request or flood a shared API server. Every knob has a value chosen
for a controller talking to one kube-apiserver; tests shrink them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube.ratelimit import PacerSettings
from sandman.base.backoff import Backoff
from sandman.base.settings import part, setting

__all__ = ["ClientSettings", "Timeouts"]


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect_s: float = setting(5.0, help="connecting to the API server")
    request_s: float = setting(30.0, help="a whole non-watch request (connect + send + read)")
    watch_idle_s: float = setting(
        120.0, help="a watch stream with no bytes (no event, no bookmark) this long is dead"
    )

    def __post_init__(self) -> None:
        if min(self.connect_s, self.request_s, self.watch_idle_s) <= 0:
            raise ValueError("timeouts must be > 0")


@dataclass(frozen=True, slots=True)
class ClientSettings:
    timeouts: Timeouts = part(Timeouts, help="timeouts of the API requests")
    max_connections: int = setting(
        100, help="connections kept to the API server (HTTP/1.1: one request in flight each)"
    )
    qps: float = setting(
        200.0,
        help="client-side token bucket: sustained requests/s, the pacer's ceiling (0: "
        "unlimited); watches are long-lived and not counted after they start",
    )
    burst: int = setting(400, help="the token bucket's size (requests at once after a pause)")
    pacer: PacerSettings = part(
        PacerSettings,
        help="the bucket's rate follows the server's answers below qps (AIMD, kube/ratelimit.py)",
    )
    max_attempts: int = setting(
        5, help="attempts of a request that is safe to repeat (1: no retry)"
    )
    backoff_base_s: float = setting(
        0.1,
        help="backoff between attempts, full jitter: retry n waits up to "
        "backoff_base_s * 2**(n-1), capped at backoff_cap_s",
    )
    backoff_cap_s: float = setting(5.0, help="the longest wait between attempts")
    max_retry_after_s: float = setting(
        30.0, help="longest Retry-After honoured; a larger one is capped to it (and still waited)"
    )
    user_agent: str = setting("sandman-controller/0.1", help="the User-Agent of every request")

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
            initial_s=self.backoff_base_s,
            cap_s=self.backoff_cap_s,
            jitter="full",
            max_retry_after_s=self.max_retry_after_s,
        )
