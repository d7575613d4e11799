"""A model of API Priority and Fairness: who gets how many requests per second.

Each request is classified by the first matching flow schema (by user name, group or
service account) into a priority level. A level has two budgets — mutating and read — each
a token bucket (rate, burst) plus a concurrency cap. A request that finds no token waits in
the level's queue if a token will come within ``max_queue_wait_s``; otherwise it is rejected
with 429 TooManyRequests and a Retry-After header, as the real server does when a priority
level's queues are full. Watches are admitted without holding a seat (upstream counts only
their initialisation). The ``exempt`` level (system:masters) is never limited.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from simcluster.apiserver.auth import User
from simcluster.errors import SimclusterError, TooManyRequests

__all__ = ["Budget", "FlowControl", "FlowSchema", "PriorityLevel", "default_flow_control"]


@dataclass(frozen=True, slots=True)
class Budget:
    rate: float = 0.0  # requests/s; 0 = unlimited
    burst: float = 0.0  # bucket size; 0 = rate (one second's worth)
    concurrency: int = 0  # requests in flight; 0 = unlimited


@dataclass(frozen=True, slots=True)
class PriorityLevel:
    name: str
    mutating: Budget = Budget()
    read: Budget = Budget()
    max_queue_wait_s: float = 0.25
    exempt: bool = False


@dataclass(frozen=True, slots=True)
class FlowSchema:
    name: str
    level: str
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()  # "namespace/name" or "namespace/*"

    def matches(self, user: User) -> bool:
        if "*" in self.users or user.name in self.users:
            return True
        if any(g in user.groups for g in self.groups):
            return True
        sa = user.service_account
        if sa is not None:
            ns, name = sa
            return f"{ns}/{name}" in self.service_accounts or f"{ns}/*" in self.service_accounts
        return False


@dataclass
class _Bucket:
    budget: Budget
    tokens: float = 0.0
    stamp: float = field(default_factory=time.monotonic)
    inflight: int = 0

    def __post_init__(self) -> None:
        self.tokens = self.capacity

    @property
    def capacity(self) -> float:
        return self.budget.burst or max(self.budget.rate, 1.0)

    def wait_for_token(self) -> float:
        """Take a token now (returns 0) or reserve one and return how long to wait for it."""
        if self.budget.rate <= 0:
            return 0.0
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.budget.rate)
        self.stamp = now
        self.tokens -= 1.0
        if self.tokens >= 0:
            return 0.0
        return -self.tokens / self.budget.rate

    def refund(self) -> None:
        self.tokens += 1.0


class FlowControl:
    def __init__(self, levels: list[PriorityLevel], schemas: list[FlowSchema]) -> None:
        self.levels = {lv.name: lv for lv in levels}
        self.schemas = schemas
        self._buckets: dict[tuple[str, bool], _Bucket] = {}
        for lv in levels:
            self._buckets[(lv.name, True)] = _Bucket(lv.mutating)
            self._buckets[(lv.name, False)] = _Bucket(lv.read)
        for s in schemas:
            if s.level not in self.levels:
                raise SimclusterError(
                    f"flow schema {s.name} names unknown priority level {s.level}"
                )

    def classify(self, user: User) -> tuple[FlowSchema, PriorityLevel]:
        for s in self.schemas:
            if s.matches(user):
                return s, self.levels[s.level]
        raise SimclusterError(f"no flow schema matches user {user.name}")

    @contextlib.asynccontextmanager
    async def admit(
        self, user: User, mutating: bool, watch: bool = False
    ) -> AsyncIterator[tuple[str, str]]:
        schema, level = self.classify(user)
        if level.exempt:
            yield schema.name, level.name
            return
        bucket = self._buckets[(level.name, mutating)]
        wait = bucket.wait_for_token()
        if wait > level.max_queue_wait_s:
            bucket.refund()
            raise TooManyRequests(
                "Too many requests, please try again later.",
                retry_after=max(1, math.ceil(wait)),
                details={"priorityLevel": level.name, "flowSchema": schema.name},
            )
        if wait > 0:
            await asyncio.sleep(wait)
        cap = bucket.budget.concurrency
        if cap and not watch and bucket.inflight >= cap:
            raise TooManyRequests(
                "Too many requests, please try again later.",
                retry_after=1,
                details={"priorityLevel": level.name, "flowSchema": schema.name},
            )
        bucket.inflight += 0 if watch else 1
        try:
            yield schema.name, level.name
        finally:
            bucket.inflight -= 0 if watch else 1


def default_flow_control(config: Mapping[str, Any] | None = None) -> FlowControl:
    """Levels and schemas from a profile's ``apiserver.flowcontrol`` section (or defaults:
    everything unlimited, nodes and masters in their own levels)."""
    config = config or {}
    levels = [
        PriorityLevel(
            name,
            Budget(**(spec.get("mutating") or {})),
            Budget(**(spec.get("read") or {})),
            float(spec.get("max_queue_wait_s", 0.25)),
            bool(spec.get("exempt", False)),
        )
        for name, spec in (config.get("levels") or {}).items()
    ]
    names = {lv.name for lv in levels}
    for name, exempt in (
        ("exempt", True),
        ("node-high", False),
        ("workload-low", False),
        ("global-default", False),
    ):
        if name not in names:
            levels.append(PriorityLevel(name, exempt=exempt))
    schemas = [
        FlowSchema(
            s["name"],
            s["level"],
            tuple(s.get("users") or ()),
            tuple(s.get("groups") or ()),
            tuple(s.get("service_accounts") or ()),
        )
        for s in config.get("schemas") or []
    ]
    schemas += [
        FlowSchema("exempt", "exempt", groups=("system:masters",)),
        FlowSchema("system-nodes", "node-high", groups=("system:nodes",)),
        FlowSchema("service-accounts", "workload-low", groups=("system:serviceaccounts",)),
        FlowSchema("global-default", "global-default", users=("*",)),
    ]
    return FlowControl(levels, schemas)
