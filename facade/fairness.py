"""Fair sharing between tenants: caps on what each holds open, failed logins, allow-lists.

Why caps and not a queue: every tenant's tool calls and long waits share one facade replica
(its event loop, its connection pools to the daemons). Before these caps one tenant with
thousands of slow execs or parked ``?wait=`` polls could take the whole replica, and every
other tenant's calls queued behind it. Each tenant now has two counters of its own, held for
the whole of a call (a streamed exec until its last line): ``max_tool_calls`` proxied tool
calls and ``max_waits`` long waits (``GET /v1/sandboxes/{id}?wait=``, streamed execs, process
waits, and any tool call with a ``wait`` query). A call over its tenant's cap is answered at
once with 429 ``too_many_calls`` / ``too_many_waits`` and ``Retry-After`` — the trainer backs
off, nothing is parked — and since no counter is shared, a tenant at its cap delays no one
else (tests/e2e/test_fair_sharing.py holds this with two tenants on a real stack). The counts
are per replica: with R replicas a tenant may hold R times its cap (as with create rates).

Failed logins: an unknown bearer token (any ``Authorization`` header that names no tenant; a
request without one is a plain 401, nothing guessed) costs one token of a bucket kept per
remote address
(``LoginThrottleSettings``); when the bucket is empty the answer is 429 ``login_throttled``
instead of 401, until it refills. A *valid* token never touches a bucket, so nobody's
failures — not even from the same address (an ingress, a NAT) — throttle a real tenant.
The table of addresses is bounded (the oldest is forgotten first).

Allow-lists: ``allowed_classes`` (another team's tainted node pool is a class) and
``allowed_registries`` per tenant, checked on create and on ``POST /v1/prepare`` with 403
``class_not_allowed`` / ``registry_not_allowed``. Absent means anything (the development
config); production sets both (docs/operator-guide.md, "Fair sharing"). An entry is a
registry host (``registry.example:5000``) or a host and a path prefix (``ghcr.io/team-a``),
matched on ``/`` boundaries against the image reference as Docker normalises it (no host:
``docker.io``; a bare name: ``docker.io/library/<name>``).
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from daemon.sandbox import api
from kube.ratelimit import TokenBucket
from sandman.base.settings import setting
from sandman.wire.errors import Reason

from .errors import FacadeError
from .tenancy import Tenant

__all__ = [
    "CALL",
    "LONG_WAITS",
    "REFUSALS",
    "WAIT",
    "InFlight",
    "LoginThrottle",
    "LoginThrottleSettings",
    "check_class",
    "check_image",
    "image_path",
]

CALL: Literal["call"] = "call"
WAIT: Literal["wait"] = "wait"
Kind = Literal["call", "wait"]
#: Proxied daemon operations that park until something happens: they count as waits.
LONG_WAITS = frozenset({api.EXEC_STREAM.operation, api.PROCESS_WAIT.operation})
#: The reasons this module refuses with: each refusal is counted per tenant
#: (``sandman_facade_fair_share_refusals_total``; the failed-login throttle's as tenant "").
REFUSALS = frozenset(
    {
        Reason.TOO_MANY_CALLS,
        Reason.TOO_MANY_WAITS,
        Reason.LOGIN_THROTTLED,
        Reason.CLASS_NOT_ALLOWED,
        Reason.REGISTRY_NOT_ALLOWED,
    }
)
#: What a refused call is told to wait: the caps free up as calls end, not on a clock.
RETRY_AFTER_S = 1.0


@dataclass(frozen=True, slots=True)
class LoginThrottleSettings:
    burst: int = setting(
        50,
        help="unknown bearer tokens one remote address may present before it is answered "
        "429 login_throttled (a valid token is never throttled)",
    )
    rate_per_s: float = setting(
        1.0, help="how fast an address's allowance of unknown tokens refills"
    )
    addresses: int = setting(
        10_000, help="addresses whose failures are remembered (the oldest forgotten first)"
    )


class InFlight:
    """Per tenant, the tool calls and the long waits in flight in this replica."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, Kind], int] = {}

    def count(self, tenant: Tenant, kind: Kind) -> int:
        return self._counts.get((tenant.name, kind), 0)

    @contextlib.contextmanager
    def hold(self, tenant: Tenant, kind: Kind) -> Iterator[None]:
        """One slot of ``tenant``'s cap for the block; 429 when every slot is taken."""
        limit = tenant.max_tool_calls if kind == CALL else tenant.max_waits
        key = (tenant.name, kind)
        held = self._counts.get(key, 0)
        if held >= limit:
            what = "proxied tool calls" if kind == CALL else "long waits"
            raise FacadeError(
                f"tenant {tenant.name} has {held} {what} in flight, its limit",
                reason=Reason.TOO_MANY_CALLS if kind == CALL else Reason.TOO_MANY_WAITS,
                retry_after_s=RETRY_AFTER_S,
            )
        self._counts[key] = held + 1
        try:
            yield
        finally:
            self._counts[key] -= 1


class LoginThrottle:
    """A token bucket of failed logins per remote address (module docstring)."""

    def __init__(
        self, settings: LoginThrottleSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def failed(self, address: str) -> float:
        """Note a failed login from ``address``: 0.0 while it is within its allowance (the
        answer is a 401), else the seconds until it has one again (a 429)."""
        s = self.settings
        bucket = self._buckets.get(address)
        if bucket is None:
            bucket = TokenBucket(s.rate_per_s, s.burst, self._clock)
            self._buckets[address] = bucket
            while len(self._buckets) > s.addresses:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(address)
        return bucket.try_take(1)


def check_class(tenant: Tenant, name: str) -> None:
    if tenant.allowed_classes is not None and name not in tenant.allowed_classes:
        raise FacadeError(
            f"tenant {tenant.name} may not use class {name!r}", reason=Reason.CLASS_NOT_ALLOWED
        )


def check_image(tenant: Tenant, image: str) -> None:
    allowed = tenant.allowed_registries
    if allowed is None:
        return
    path = image_path(image)
    if not any(path == entry.lower() or path.startswith(entry.lower() + "/") for entry in allowed):
        raise FacadeError(
            f"image {image!r} ({path}) is not from a registry tenant {tenant.name} may use",
            reason=Reason.REGISTRY_NOT_ALLOWED,
        )


def image_path(image: str) -> str:
    """The reference as Docker normalises it, host and repository without tag or digest:
    ``ubuntu:22.04`` -> ``docker.io/library/ubuntu``, ``reg:5000/a/b@sha256:..`` ->
    ``reg:5000/a/b`` (the host lower-cased)."""
    name = image.split("@", 1)[0]
    head, sep, rest = name.partition("/")
    if sep and ("." in head or ":" in head or head == "localhost"):
        host, repository = head.lower(), rest
    else:
        host, repository = "docker.io", name
    if host == "docker.io" and "/" not in repository:
        repository = f"library/{repository}"
    last = repository.rsplit("/", 1)
    last[-1] = last[-1].split(":", 1)[0]
    return f"{host}/{'/'.join(last)}"
