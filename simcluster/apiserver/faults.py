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

__all__ = ["ANY", "ERROR_CODES", "ApiFaults", "ErrorRate"]


ERROR_CODES = (429, 500, 504)
ANY = "*"


@dataclass(frozen=True, slots=True)
class ErrorRate:
    rate: float  # 0..1, fraction of matching requests that fail
    code: int  # 429, 500 or 504 (timeout)
    #: More codes to draw from (uniformly, with ``code``): a mix such as 429 and 500.
    also: tuple[int, ...] = ()


@dataclass
class ApiFaults:
    """Error rates keyed by (user, verb), ``*`` matching any; the most specific key wins:
    (user, verb), (user, *), (*, verb), (*, *). A user-scoped fault lets a test fail one
    client's requests (Sandman's service account) while the kubelets and the test's own
    observer are served normally."""

    seed: int = 0
    errors: dict[tuple[str, str], ErrorRate] = field(default_factory=dict)
    latency_s: float = 0.0
    latency_until: float = 0.0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def set_error_rate(
        self, verb: str, rate: float, code: int | tuple[int, ...], user: str = ANY
    ) -> None:
        codes = (code,) if isinstance(code, int) else tuple(code)
        if not codes or any(c not in ERROR_CODES for c in codes):
            raise ValueError("error codes must be 429, 500 or 504")
        if rate <= 0:
            self.errors.pop((user, verb), None)
        else:
            self.errors[(user, verb)] = ErrorRate(min(rate, 1.0), codes[0], codes[1:])

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

    def error_for(self, verb: str, user: str = ANY) -> ApiError | None:
        er = None
        for key in ((user, verb), (user, ANY), (ANY, verb), (ANY, ANY)):
            er = self.errors.get(key)
            if er is not None:
                break
        if er is None or self._rng.random() >= er.rate:
            return None
        code = self._rng.choice((er.code, *er.also)) if er.also else er.code
        if code == 429:
            return TooManyRequests("Too many requests, please try again later.", retry_after=1)
        if code == 504:
            # upstream's NewTimeoutError always sets details (retryAfterSeconds 0: "details":{})
            return Timeout(
                "Timeout: request did not complete within the allotted timeout", details={}
            )
        return InternalError.occurred("injected fault")
