"""Who may ask the leader for placements: the facade's ServiceAccount, proven by its token.

Why: a placement decides which node a tenant's pod lands on, and the placement endpoint
is plain HTTP on the pod network. Before issue 24 anyone who could reach the port could
ask for placements (reserving capacity, probing the cluster's state) — and the
NetworkPolicy that admits only the facade is as good as the CNI enforcing it. So each call
carries a bearer token, and the controller asks the API server whose it is with a
TokenReview (``authentication.k8s.io/v1``), exactly as an aggregated API server or the
kubelet authenticates its callers: no secret of Sandman's own to distribute or rotate.

Then authorization, by identity: the reviewed user must be one of ``users`` or in one of
``groups`` (default: ``system:serviceaccount:sandman-system:sandman-facade``). With
``audiences`` set (production: ``sandman-placement``, a projected token the kubelet
rotates, kube/placement.py's ``token_file``), the token must have been issued for the
placement endpoint, so the controller never holds a token it could replay against the API
server as the facade.

Cost: a TokenReview is one API request; its answer is cached per token (a SHA-256 of it,
never the token) for ``cache_ttl_s``, in a bounded LRU, with one review in flight per
token however many calls arrive at once. A burst's placement calls therefore cost one
review per facade replica and TTL. A failed review (the API server unreachable) is not
cached and answers 503: the facade then creates its pods unbound, as for any failed call.

Answers: 401 ``unauthenticated`` (no bearer token, or the API server does not accept it),
403 ``caller_not_allowed`` (a valid token of another identity), 503
``token_review_failed``; the body is the endpoint's ``{"reason", "message"}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kube.errors import KubeError
from kube.resources import TOKEN_REVIEWS
from kube.verbs import Verbs
from sandman.base.settings import setting

__all__ = ["CallerVerifier", "PlacementAuthSettings", "Refusal"]

log = logging.getLogger(__name__)

FACADE_USER = "system:serviceaccount:sandman-system:sandman-facade"


def _names(text: str) -> frozenset[str]:
    return frozenset(n.strip() for n in text.split(",") if n.strip())


@dataclass(frozen=True, slots=True)
class PlacementAuthSettings:
    users: str = setting(
        FACADE_USER, help="comma-separated usernames allowed to ask for placements"
    )
    groups: str = setting("", help="comma-separated groups whose members may ask too")
    audiences: str = setting(
        "",
        help='comma-separated audiences the caller\'s token must be valid for; "": the API '
        "server's (the facade's own API token)",
    )
    cache_ttl_s: float = setting(
        10.0, help="how long a TokenReview's answer is reused for the same token"
    )
    cache_size: int = setting(1024, help="tokens whose answers are cached at most (LRU)")

    def __post_init__(self) -> None:
        if self.cache_ttl_s < 0 or self.cache_size < 1:
            raise ValueError("cache_ttl_s must be >= 0 and cache_size >= 1")
        if not _names(self.users) and not _names(self.groups):
            raise ValueError("users or groups must name at least one caller")


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class _Review:
    """A TokenReview's answer: the user (empty: not authenticated) and groups."""

    user: str
    groups: frozenset[str]
    error: str = ""


class CallerVerifier:
    """``await check(authorization_header)``: None when the caller may ask, else why not."""

    def __init__(
        self,
        api: Verbs,
        settings: PlacementAuthSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = api
        self.settings = s = settings or PlacementAuthSettings()
        self._users, self._groups = _names(s.users), _names(s.groups)
        self._audiences = sorted(_names(s.audiences))
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, _Review]] = OrderedDict()
        self._inflight: dict[str, asyncio.Task[_Review]] = {}
        #: TokenReviews sent, and calls answered from the cache (tests, the benchmark).
        self.reviews = 0
        self.cached = 0

    async def check(self, authorization: str | None) -> Refusal | None:
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Refusal(401, "unauthenticated", "a bearer token is required")
        try:
            review = await self._review(token)
        except KubeError as e:
            log.warning("TokenReview failed: %s", e)
            return Refusal(503, "token_review_failed", f"the token could not be reviewed: {e}")
        if not review.user:
            return Refusal(401, "unauthenticated", f"the token is not valid: {review.error}")
        if review.user in self._users or review.groups & self._groups:
            return None
        return Refusal(403, "caller_not_allowed", f"{review.user} may not ask for placements")

    async def _review(self, token: str) -> _Review:
        key = hashlib.sha256(token.encode()).hexdigest()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > self._clock():
            self._cache.move_to_end(key)
            self.cached += 1
            return hit[1]
        task = self._inflight.get(key)
        if task is None:
            task = self._inflight[key] = asyncio.create_task(self._ask(token))
            task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        review = await asyncio.shield(task)
        self._remember(key, review)
        return review

    def _remember(self, key: str, review: _Review) -> None:
        self._cache[key] = (self._clock() + self.settings.cache_ttl_s, review)
        self._cache.move_to_end(key)
        while len(self._cache) > self.settings.cache_size:
            self._cache.popitem(last=False)

    async def _ask(self, token: str) -> _Review:
        self.reviews += 1
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = self._audiences
        body = {"apiVersion": TOKEN_REVIEWS.api_version, "kind": "TokenReview", "spec": spec}
        answer = await self.client.create(TOKEN_REVIEWS, body)
        status = answer.get("status") or {}
        user = status.get("user") or {}
        if not status.get("authenticated"):
            return _Review("", frozenset(), str(status.get("error") or "not authenticated"))
        return _Review(str(user.get("username") or ""), frozenset(user.get("groups") or ()))
