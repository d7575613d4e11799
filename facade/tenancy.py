"""Tenants and admission: who may create how many sandboxes, how fast.

Bearer tokens map to tenants (only SHA-256 digests of tokens are configured, so the tenants
file is not a secret), each tenant to one namespace. Admission is backpressure, not a queue:
a create that would exceed the tenant's concurrent-sandbox limit or its create rate is
answered at once with 429 and a Retry-After, instead of piling up Pending pods on a shared
cluster. A Kubernetes ResourceQuota in the tenant's namespace stays the hard backstop.
Image announcements have their own caps (``max_prepared_images``, ``max_prepared_sandboxes``:
what a tenant may have nodes pull ahead; checked in facade/announcements.py); tool calls and
long waits theirs (``max_tool_calls``, ``max_waits``), and the classes and registries a tenant
may use their allow-lists (``allowed_classes``, ``allowed_registries``): facade/fairness.py.
Standing pools (``pools: [{image, class, min, max}]``): the few images every step uses, kept
warm by the controller from one ImagePreparation per pool that the facade writes at start
(facade/standing.py); checked here for their shape and against the tenant's
``max_sandboxes``, and against the classes offered in facade/config.py.

Everything here is deterministic given its clock (injected; tests pass a fake one). The facade's
replicas each run it;
with R replicas each should be given 1/R of a tenant's rate (documented with the facade).

The namespace *is* the isolation between tenants (every read is a namespace's watch cache),
so two tenants configured with one namespace would see and delete each other's sandboxes:
such a file is refused at start, as are duplicate names, names that are not label values
(a tenant's name labels its pods), namespaces that are not DNS labels, and limits that are
not finite positive numbers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import time
from collections.abc import Callable
from typing import Any

import msgspec
import yaml

from kube.ratelimit import TokenBucket
from sandman.wire.errors import Reason
from sandman.wire.facade import DEFAULT_CLASS
from sandman.wire.patterns import ImageRef

__all__ = ["Admission", "StandingPool", "TenancyError", "Tenant", "TenantDirectory"]

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


class TenancyError(ValueError):
    """The tenants configuration is invalid."""


@dataclasses.dataclass(frozen=True, slots=True)
class StandingPool:
    """A standing pool of one tenant: ``min`` unclaimed pool sandboxes of (image, class) kept
    at all times, never more than ``max`` of the pool's pods alive at once (claimed ones
    included: a claimed pod counts until it is gone; absent in the file: the tenant's
    ``max_sandboxes``). docs/operator-guide.md, "Standing pools"."""

    image: str
    sandbox_class: str
    min: int
    max: int


@dataclasses.dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    namespace: str
    max_sandboxes: int
    create_rate_per_s: float
    create_burst: int
    #: Caps over the tenant's live image announcements (facade/announcements.py).
    max_prepared_images: int = 1000
    max_prepared_sandboxes: int = 20_000
    #: Fair sharing (facade/fairness.py): proxied tool calls, and long waits (``?wait=``,
    #: streamed execs, process waits), in flight at once in one replica.
    max_tool_calls: int = 256
    max_waits: int = 1024
    #: The sandbox classes and image registries the tenant may use; None: any.
    allowed_classes: tuple[str, ...] | None = None
    allowed_registries: tuple[str, ...] | None = None
    #: Standing pools, at most one per (image, class).
    pools: tuple[StandingPool, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Admission:
    """The answer to "may this tenant create n sandboxes now?" (a status, never raised)."""

    #: Why not (``batch_too_large``, ``quota_exceeded``, ``rate_limited``); None: admitted.
    reason: Reason | None = None
    message: str = ""
    retry_after_s: float = 0.0

    @property
    def allowed(self) -> bool:
        return self.reason is None


class TenantDirectory:
    """Token -> tenant lookup plus per-tenant admission state."""

    def __init__(
        self, tenants: dict[str, Tenant], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._by_digest = tenants
        self._buckets = {
            t.name: TokenBucket(t.create_rate_per_s, t.create_burst, clock)
            for t in tenants.values()
        }

    @classmethod
    def from_yaml(cls, text: str, clock: Callable[[], float] = time.monotonic) -> TenantDirectory:
        try:
            document = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise TenancyError(f"tenants file is not valid YAML: {exc}") from exc
        entries = document.get("tenants") if isinstance(document, dict) else None
        if not isinstance(entries, list) or not entries:
            raise TenancyError("tenants file needs a non-empty 'tenants' list")
        by_digest: dict[str, Tenant] = {}
        names: dict[str, int] = {}
        namespaces: dict[str, int] = {}
        for index, entry in enumerate(entries):
            tenant, digests = _parse_tenant(entry, index)
            for key, seen, what in (
                (tenant.name, names, "name"),
                (tenant.namespace, namespaces, "namespace"),
            ):
                if key in seen:
                    raise TenancyError(
                        f"tenants[{index}] ({tenant.name}): {what} {key!r} is already "
                        f"tenants[{seen[key]}]'s; tenants must not share a {what}"
                    )
                seen[key] = index
            for digest in digests:
                if digest in by_digest:
                    raise TenancyError(
                        f"tenants[{index}]: a token is already used by another tenant"
                    )
                by_digest[digest] = tenant
        return cls(by_digest, clock)

    def tenants(self) -> list[Tenant]:
        """Every configured tenant, once (a tenant may have several tokens)."""
        return list({t.name: t for t in self._by_digest.values()}.values())

    def authenticate(self, bearer: str) -> Tenant | None:
        return self._by_digest.get(hashlib.sha256(bearer.encode()).hexdigest())

    def admit(self, tenant: Tenant, count: int, live: int) -> Admission:
        """May ``tenant``, which has ``live`` sandboxes, create ``count`` more now?"""
        if count > tenant.create_burst or count > tenant.max_sandboxes:
            limit = min(tenant.create_burst, tenant.max_sandboxes)
            return Admission(Reason.BATCH_TOO_LARGE, f"a batch of {count} exceeds {limit}")
        if live + count > tenant.max_sandboxes:
            return Admission(
                Reason.QUOTA_EXCEEDED,
                f"{live} live sandboxes + {count} exceeds the limit of {tenant.max_sandboxes}",
                retry_after_s=1.0,
            )
        wait = self._buckets[tenant.name].try_take(count)
        if wait > 0:
            return Admission(Reason.RATE_LIMITED, "create rate limit reached", wait)
        return Admission()


def _limit(entry: dict[str, Any], name: str) -> int:
    """An optional integer limit of a tenant entry (default: the Tenant field's)."""
    default = next(f.default for f in dataclasses.fields(Tenant) if f.name == name)
    return int(entry.get(name, default))


def _names(entry: dict[str, Any], name: str) -> tuple[str, ...] | None:
    """An optional allow-list of a tenant entry: absent is None (anything), a list of
    non-empty strings otherwise (empty: nothing allowed)."""
    if entry.get(name) is None:
        return None
    items = entry[name]
    if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
        raise TypeError(f"{name} must be a list of non-empty strings")
    return tuple(i.rstrip("/") for i in items)


def _parse_tenant(entry: Any, index: int) -> tuple[Tenant, list[str]]:
    if not isinstance(entry, dict):
        raise TenancyError(f"tenants[{index}] must be a mapping")
    try:
        tenant = Tenant(
            name=str(entry["name"]),
            namespace=str(entry.get("namespace") or f"sandman-{entry['name']}"),
            max_sandboxes=int(entry.get("max_sandboxes", 1000)),
            create_rate_per_s=float(entry.get("create_rate_per_s", 100.0)),
            create_burst=int(entry.get("create_burst", 1000)),
            max_prepared_images=_limit(entry, "max_prepared_images"),
            max_prepared_sandboxes=_limit(entry, "max_prepared_sandboxes"),
            max_tool_calls=_limit(entry, "max_tool_calls"),
            max_waits=_limit(entry, "max_waits"),
            allowed_classes=_names(entry, "allowed_classes"),
            allowed_registries=_names(entry, "allowed_registries"),
        )
        digests = [str(d).lower() for d in entry["token_sha256"]]
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise TenancyError(f"tenants[{index}]: {exc!r}") from exc
    if not _LABEL_VALUE.fullmatch(tenant.name):
        raise TenancyError(f"tenants[{index}]: name {tenant.name!r} is not a label value")
    if not _DNS_LABEL.fullmatch(tenant.namespace):
        raise TenancyError(f"tenants[{index}]: namespace {tenant.namespace!r} is not a DNS label")
    if (
        tenant.max_sandboxes < 1
        or not math.isfinite(tenant.create_rate_per_s)
        or tenant.create_rate_per_s <= 0
        or tenant.create_burst < 1
        or tenant.max_prepared_images < 1
        or tenant.max_prepared_sandboxes < 1
        or tenant.max_tool_calls < 1
        or tenant.max_waits < 1
    ):
        raise TenancyError(f"tenants[{index}]: limits must be finite and positive")
    if not digests or any(len(d) != 64 for d in digests):
        raise TenancyError(f"tenants[{index}]: token_sha256 must list SHA-256 hex digests")
    pools = _pools(entry.get("pools"), index, tenant.max_sandboxes)
    tenant = dataclasses.replace(tenant, pools=pools)
    _check_pools(tenant, index)
    return tenant, digests


_POOL_KEYS = frozenset({"image", "class", "min", "max"})


def _pools(entries: Any, index: int, default_max: int) -> tuple[StandingPool, ...]:
    """A tenant entry's ``pools`` list: each entry's shape (``_check_pools`` checks them
    against the tenant's limits once the tenant is built)."""
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise TenancyError(f"tenants[{index}]: pools must be a list of {{image, class, min, max}}")
    return tuple(
        _pool(entry, f"tenants[{index}].pools[{i}]", default_max) for i, entry in enumerate(entries)
    )


def _pool(entry: Any, where: str, default_max: int) -> StandingPool:
    if not isinstance(entry, dict):
        raise TenancyError(f"{where}: must be a mapping {{image, class, min, max}}")
    unknown = sorted(str(k) for k in set(entry) - _POOL_KEYS)
    if unknown:
        raise TenancyError(f"{where}: unknown keys {unknown} (known: image, class, min, max)")
    try:
        image = msgspec.convert(entry.get("image"), ImageRef)
    except msgspec.ValidationError as exc:
        raise TenancyError(f"{where}: image is not an image reference ({exc})") from exc
    sandbox_class = entry.get("class", DEFAULT_CLASS)
    if not isinstance(sandbox_class, str) or not _LABEL_VALUE.fullmatch(sandbox_class):
        raise TenancyError(f"{where} ({image}): class {sandbox_class!r} is not a class name")
    counts = [entry.get(k) for k in ("min", "max")]
    if any(isinstance(c, bool) or not isinstance(c, int | None) for c in counts):
        raise TenancyError(f"{where} ({image}): min and max must be whole numbers")
    if counts[0] is None:
        raise TenancyError(f"{where} ({image}): min is required (0 keeps none warm)")
    most = default_max if counts[1] is None else counts[1]
    pool = StandingPool(image, sandbox_class, counts[0], most)
    if not 0 <= pool.min <= pool.max or pool.max < 1:
        raise TenancyError(
            f"{where} ({image}): needs 0 <= min <= max and max >= 1 (min {pool.min}, "
            f"max {pool.max})"
        )
    return pool


def _check_pools(tenant: Tenant, index: int) -> None:
    """Each pool within the tenant's ``max_sandboxes``, their reserves together too (the
    reserve is live sandboxes of the tenant at all times), one pool per (image, class)."""
    seen: dict[tuple[str, str], int] = {}
    for i, pool in enumerate(tenant.pools):
        where = f"tenants[{index}] ({tenant.name}).pools[{i}] ({pool.image})"
        if pool.max > tenant.max_sandboxes:
            raise TenancyError(
                f"{where}: max {pool.max} exceeds the tenant's max_sandboxes {tenant.max_sandboxes}"
            )
        key = (pool.image, pool.sandbox_class)
        if key in seen:
            raise TenancyError(f"{where}: (image, class) {key} is already pools[{seen[key]}]'s")
        seen[key] = i
    reserve = sum(p.min for p in tenant.pools)
    if reserve > tenant.max_sandboxes:
        raise TenancyError(
            f"tenants[{index}] ({tenant.name}): the pools' min add up to {reserve}, over the "
            f"tenant's max_sandboxes {tenant.max_sandboxes}"
        )
