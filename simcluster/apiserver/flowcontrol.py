"""A model of API Priority and Fairness: who gets how many requests per second.

Each request is classified by the first matching flow schema — in ``matchingPrecedence``
order, as upstream — into a priority level. A level has two budgets — mutating and read —
each a token bucket (rate, burst) plus a concurrency cap. A request that finds no token waits
in the level's queue if a token will come within ``max_queue_wait_s``; otherwise it is
rejected with 429 TooManyRequests and a Retry-After header, as the real server does when a
priority level's queues are full. Watches are admitted without holding a seat (upstream
counts only their initialisation). The ``exempt`` level (system:masters) is never limited.

Where the configuration comes from: the profile's levels and schemas, then built-in ones
(upstream's names and precedences), then the FlowSchema and PriorityLevelConfiguration
objects applied through the API (``apf_objects.py``), which replace a configured one of the
same name or add to them, at runtime. A level without a budget of its own (every applied one,
and built-in ones the profile does not budget) gets the share ``nominalConcurrencyShares /
sum of all non-exempt levels' shares`` of the server's total budget (``server`` in the
profile) — upstream's formula for a level's nominal concurrency limit, applied to rates.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from simcluster.apiserver.auth import User
from simcluster.errors import SimclusterError, TooManyRequests

if TYPE_CHECKING:
    from simcluster.apiserver.rbac import Attributes

__all__ = [
    "Admission",
    "Budget",
    "FlowControl",
    "FlowSchema",
    "PriorityLevel",
    "SchemaRule",
    "default_flow_control",
]

#: upstream's nominalConcurrencyShares of the built-in levels simcluster has, and the
#: default of a PriorityLevelConfiguration that sets none
BUILTIN_SHARES = {"node-high": 40, "workload-low": 100, "global-default": 20}
DEFAULT_SHARES = 30
#: upstream's matchingPrecedence of the built-in schemas; profile ones default to 1000
BUILTIN_PRECEDENCE = {
    "exempt": 1,
    "system-nodes": 500,
    "service-accounts": 9000,
    "global-default": 9900,
}
DEFAULT_PRECEDENCE = 1000


@dataclass(frozen=True, slots=True)
class Budget:
    rate: float = 0.0  # requests/s; 0 = unlimited
    burst: float = 0.0  # bucket size; 0 = rate (one second's worth)
    concurrency: int = 0  # requests in flight; 0 = unlimited

    def share(self, fraction: float) -> Budget:
        """This budget scaled to ``fraction`` of it (a level's share of the server's)."""
        if self.rate <= 0 and not self.concurrency:
            return Budget()
        return Budget(
            self.rate * fraction,
            self.burst * fraction,
            max(1, math.ceil(self.concurrency * fraction)) if self.concurrency else 0,
        )


@dataclass(frozen=True, slots=True)
class PriorityLevel:
    name: str
    #: None: this level's share of the server's budget (``shares``)
    mutating: Budget | None = Budget()
    read: Budget | None = Budget()
    max_queue_wait_s: float = 0.25
    exempt: bool = False
    shares: int = DEFAULT_SHARES


class SchemaRule(Protocol):
    """A FlowSchema's ``PolicyRulesWithSubjects`` (apf_objects.py)."""

    def matches(self, user: User, attrs: Attributes) -> bool: ...


@dataclass(frozen=True, slots=True)
class FlowSchema:
    name: str
    level: str
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()  # "namespace/name" or "namespace/*"
    precedence: int = DEFAULT_PRECEDENCE
    #: an applied FlowSchema's rules (subjects and verbs/resources); None: match by subject
    rules: tuple[SchemaRule, ...] | None = None

    def matches(self, user: User, attrs: Attributes | None = None) -> bool:
        if self.rules is not None:
            return attrs is not None and any(r.matches(user, attrs) for r in self.rules)
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


@dataclass(frozen=True, slots=True)
class Admission:
    schema: FlowSchema
    level: PriorityLevel
    waited_s: float = 0.0


class FlowControl:
    def __init__(
        self,
        levels: list[PriorityLevel],
        schemas: list[FlowSchema],
        server: tuple[Budget, Budget] = (Budget(), Budget()),
    ) -> None:
        self.base_levels = list(levels)
        self.base_schemas = list(schemas)
        self.server = server  # the total (mutating, read) budget shares divide
        self.generation = 0  # bumped by every reconfiguration (metrics follow it)
        self.levels: dict[str, PriorityLevel] = {}
        self.schemas: list[FlowSchema] = []
        self._buckets: dict[tuple[str, bool], _Bucket] = {}
        for s in schemas:
            if s.level not in {lv.name for lv in levels}:
                raise SimclusterError(
                    f"flow schema {s.name} names unknown priority level {s.level}"
                )
        self.reconfigure((), ())

    def reconfigure(self, levels: Iterable[PriorityLevel], schemas: Iterable[FlowSchema]) -> None:
        """Apply levels and schemas (from API objects) over the base configuration: one of
        the same name replaces the base one. A schema naming a level that does not exist is
        ignored (upstream marks it Dangling). Buckets of unchanged budgets are kept."""
        by_name = {lv.name: lv for lv in self.base_levels} | {lv.name: lv for lv in levels}
        total = sum(lv.shares for lv in by_name.values() if not lv.exempt) or 1
        resolved = {name: self._resolve(lv, total) for name, lv in by_name.items()}
        applied = {s.name: s for s in schemas}
        base = [s for s in self.base_schemas if s.name not in applied]
        ordered = sorted(
            [(s.precedence, 0, i, s) for i, s in enumerate(base)]
            + [(s.precedence, 1, 0, s) for s in sorted(applied.values(), key=lambda s: s.name)],
            key=lambda t: t[:3],
        )
        buckets: dict[tuple[str, bool], _Bucket] = {}
        for lv in resolved.values():
            for mutating, budget in ((True, lv.mutating), (False, lv.read)):
                old = self._buckets.get((lv.name, mutating))
                keep = old is not None and old.budget == budget
                buckets[(lv.name, mutating)] = old if keep and old else _Bucket(budget or Budget())
        self.levels = resolved
        self.schemas = [t[3] for t in ordered if t[3].level in resolved]
        self._buckets = buckets
        self.generation += 1

    def _resolve(self, level: PriorityLevel, total_shares: int) -> PriorityLevel:
        fraction = level.shares / total_shares
        mutating, read = self.server
        return replace(
            level,
            mutating=level.mutating if level.mutating is not None else mutating.share(fraction),
            read=level.read if level.read is not None else read.share(fraction),
        )

    def budget(self, level: str, mutating: bool) -> Budget:
        return self._buckets[(level, mutating)].budget

    def classify(
        self, user: User, attrs: Attributes | None = None
    ) -> tuple[FlowSchema, PriorityLevel]:
        for s in self.schemas:
            if s.matches(user, attrs):
                return s, self.levels[s.level]
        raise SimclusterError(f"no flow schema matches user {user.name}")

    @contextlib.asynccontextmanager
    async def admit(
        self, user: User, mutating: bool, watch: bool = False, attrs: Attributes | None = None
    ) -> AsyncIterator[Admission]:
        schema, level = self.classify(user, attrs)
        if level.exempt:
            yield Admission(schema, level)
            return
        bucket = self._buckets[(level.name, mutating)]
        wait = bucket.wait_for_token()
        if wait > level.max_queue_wait_s:
            bucket.refund()
            raise TooManyRequests(
                "Too many requests, please try again later.",
                retry_after=max(1, math.ceil(wait)),
                flow_schema=schema.name,
                priority_level=level.name,
            )
        if wait > 0:
            await asyncio.sleep(wait)
        cap = bucket.budget.concurrency
        if cap and not watch and bucket.inflight >= cap:
            raise TooManyRequests(
                "Too many requests, please try again later.",
                retry_after=1,
                flow_schema=schema.name,
                priority_level=level.name,
            )
        bucket.inflight += 0 if watch else 1
        try:
            yield Admission(schema, level, wait)
        finally:
            bucket.inflight -= 0 if watch else 1


def _budget(spec: Mapping[str, Any], key: str, shared: bool) -> Budget | None:
    if key in spec:
        return Budget(**(spec[key] or {}))
    return None if shared else Budget()


def default_flow_control(config: Mapping[str, Any] | None = None) -> FlowControl:
    """Levels and schemas from a profile's ``apiserver.flowcontrol`` section (or defaults:
    everything unlimited, nodes and masters in their own levels). With ``server`` (the
    server's total ``mutating``/``read`` budget) set, a level whose budget the profile does
    not give gets its share of it."""
    config = config or {}
    server_spec = config.get("server") or {}
    server = (
        Budget(**(server_spec.get("mutating") or {})),
        Budget(**(server_spec.get("read") or {})),
    )
    shared = bool(server_spec)
    levels = [
        PriorityLevel(
            name,
            _budget(spec, "mutating", shared),
            _budget(spec, "read", shared),
            float(spec.get("max_queue_wait_s", 0.25)),
            bool(spec.get("exempt", False)),
            int(spec.get("shares", BUILTIN_SHARES.get(name, DEFAULT_SHARES))),
        )
        for name, spec in (config.get("levels") or {}).items()
    ]
    names = {lv.name for lv in levels}
    if "exempt" not in names:
        levels.append(PriorityLevel("exempt", exempt=True))
    for name, shares in BUILTIN_SHARES.items():
        if name not in names:
            budget = None if shared else Budget()
            levels.append(PriorityLevel(name, budget, budget, shares=shares))
    schemas = [
        FlowSchema(
            s["name"],
            s["level"],
            tuple(s.get("users") or ()),
            tuple(s.get("groups") or ()),
            tuple(s.get("service_accounts") or ()),
            int(s.get("precedence", DEFAULT_PRECEDENCE)),
        )
        for s in config.get("schemas") or []
    ]
    p = BUILTIN_PRECEDENCE
    schemas += [
        FlowSchema("exempt", "exempt", groups=("system:masters",), precedence=p["exempt"]),
        FlowSchema(
            "system-nodes", "node-high", groups=("system:nodes",), precedence=p["system-nodes"]
        ),
        FlowSchema(
            "service-accounts",
            "workload-low",
            groups=("system:serviceaccounts",),
            precedence=p["service-accounts"],
        ),
        FlowSchema(
            "global-default", "global-default", users=("*",), precedence=p["global-default"]
        ),
    ]
    return FlowControl(levels, schemas, server)
