"""Fault injection at the API layer: error rates per verb, latency spikes, dropped watch
streams and forced 410 on the next resume. Node-level faults (NotReady, deleted, kubelet
paused, evictions) live with the kubelets (``simcluster.cluster``).

Faults are driven through the admin endpoint (``POST /admin/faults``) or the CLI; random
choices come from a seeded generator so a failing run can be replayed.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from simcluster.errors import ApiError, InternalError, Timeout, TooManyRequests

__all__ = ["ApiFaults", "ErrorRate"]


@dataclass(frozen=True, slots=True)
class ErrorRate:
    rate: float  # 0..1, fraction of matching requests that fail
    code: int  # 429, 500 or 504 (timeout)


@dataclass
class ApiFaults:
    seed: int = 0
    errors: dict[str, ErrorRate] = field(default_factory=dict)  # verb ("*" = any) -> rate
    latency_s: float = 0.0
    latency_until: float = 0.0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def set_error_rate(self, verb: str, rate: float, code: int) -> None:
        if code not in (429, 500, 504):
            raise ValueError("error code must be 429, 500 or 504")
        if rate <= 0:
            self.errors.pop(verb, None)
        else:
            self.errors[verb] = ErrorRate(min(rate, 1.0), code)

    def spike(self, latency_s: float, duration_s: float) -> None:
        self.latency_s = latency_s
        self.latency_until = time.monotonic() + duration_s

    def clear(self) -> None:
        self.errors.clear()
        self.latency_s = 0.0

    def extra_latency(self) -> float:
        if self.latency_s and time.monotonic() < self.latency_until:
            return self.latency_s
        return 0.0

    def error_for(self, verb: str) -> ApiError | None:
        er = self.errors.get(verb) or self.errors.get("*")
        if er is None or self._rng.random() >= er.rate:
            return None
        if er.code == 429:
            return TooManyRequests("Too many requests, please try again later.", retry_after=1)
        if er.code == 504:
            return Timeout("Timeout: request did not complete within the allotted timeout")
        return InternalError("Internal error occurred: injected fault")
