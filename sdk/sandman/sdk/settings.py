"""The SDK's knobs as frozen dataclasses, passed explicitly (httpx-style), never global.

``Timeouts`` bound each HTTP call, ``Limits`` the connection pool and fan-out, and
``RetryPolicy`` how idempotent calls are repeated. A tool call (exec, files, sessions) is
never retried: it is not idempotent (a command may have run), so its failure goes straight
to the caller, who knows whether repeating it is safe.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from sandman.base.backoff import Backoff, RandomSource
from sandman.wire.keepalive import POOLED_IDLE_S

__all__ = ["Limits", "RetryPolicy", "Timeouts", "resolve_ca_file", "resolve_token", "resolve_url"]


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect_s: float = 5.0
    #: One control-plane call (create, get, list, release, lease).
    request_s: float = 30.0
    #: Added to a command's own ``timeout_s`` to bound the HTTP call that runs it.
    tool_call_slack_s: float = 30.0
    #: Tool calls without a command timeout of their own (files, info, processes).
    tool_call_s: float = 300.0
    #: Default for ``create(wait=True)`` / ``wait_ready()``.
    ready_s: float = 120.0
    #: One long-poll ``GET ?wait=`` asks the facade for at most this long, then asks again.
    poll_s: float = 20.0
    #: Bound on the release done when a context manager exits (also on cancellation).
    release_s: float = 15.0


@dataclass(frozen=True, slots=True)
class Limits:
    #: Connections to the facade at once (waits of ``create_many`` hold one each).
    max_connections: int = 256
    #: Idle pooled connections are closed after this, before the facade would close them.
    keepalive_s: float = POOLED_IDLE_S
    #: Sandboxes of one ``create_many`` waited on at once.
    wait_concurrency: int = 256


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff, each delay drawn between half and all of the step (equal jitter:
    clients that failed together do not retry together, and none comes back at once), and
    never shorter than the server's ``Retry-After``. The delays are computed by
    :class:`sandman.base.backoff.Backoff`, the one helper every Sandman retry loop uses."""

    attempts: int = 6
    initial_s: float = 0.2
    max_backoff_s: float = 10.0
    multiplier: float = 2.0
    #: A ``Retry-After`` above this is an answer, not a delay: give up and raise.
    max_retry_after_s: float = 60.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be >= 1 (1 = no retry)")
        self.backoff  # noqa: B018 - validates the backoff values now, not at the first retry

    @property
    def backoff(self) -> Backoff:
        """The delays (:class:`Backoff`, equal jitter) from this policy's values."""
        return Backoff(
            initial_s=self.initial_s,
            multiplier=self.multiplier,
            cap_s=self.max_backoff_s,
            jitter="equal",
            max_retry_after_s=self.max_retry_after_s,
        )

    def retry_delay(
        self, attempt: int, retry_after: float | None, rng: RandomSource
    ) -> float | None:
        """The sleep before retry ``attempt``, or None to give up: the attempts are spent,
        or the server's ``Retry-After`` is longer than ``max_retry_after_s``. The one
        decision of every SDK retry loop (``Transport.retry_delay`` asks it)."""
        backoff = self.backoff
        if attempt >= self.attempts or not backoff.honours(retry_after):
            return None
        return backoff.delay(attempt, retry_after, rng)


def resolve_url(url: str | None) -> str:
    """An explicit URL, else ``SANDMAN_URL`` (``sandman-dev up`` prints the line to export)."""
    found = url or os.environ.get("SANDMAN_URL")
    if not found:
        raise ValueError("no Sandman URL: pass url=... or set SANDMAN_URL")
    return found.rstrip("/")


def resolve_token(token: str | None) -> str:
    """An explicit token, else ``SANDMAN_TOKEN`` (empty: every call answers 401)."""
    return token or os.environ.get("SANDMAN_TOKEN", "")


def resolve_ca_file(ca_file: str | None) -> str | None:
    """An explicit CA bundle, else ``SANDMAN_CA_FILE``; none: the system's trust store."""
    return ca_file or os.environ.get("SANDMAN_CA_FILE") or None
