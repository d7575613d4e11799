"""Fire the burst: N sandbox requests spread evenly over a window, then release them.

Two drivers, one interface:

- :class:`FacadeDriver` (the default): what a trainer does — ``POST /v1/batches`` (or
  ``POST /v1/sandboxes`` with ``batch=1``) against the facade, which creates the pods.
- :class:`DirectDriver` (``--direct``): the benchmark creates the sandbox pods itself
  through the Kubernetes API, rendered by the facade's own ``render_pod`` and sent with
  Sandman's service-account credentials, so the creates spend the same priority level's
  budget the facade's would. It measures the controller and the cluster without the
  facade's hop; it is also how the baseline's pods are created (another scheduler name).

Each request's send time is ``requested`` and its response time ``created`` for every
sandbox it created; a request refused with 429 is retried after Retry-After, keeping the
sandbox's original ``requested`` time (the trainer asked then). Every attempt of a request
carries the request's one Idempotency-Key and its whole count, as the SDK's ``create_many``
does: the facade answers a retry with the sandboxes the key already has and creates only
the missing members, so a request that lost its replica mid-way (``--kill-facade-at``) is
answered on another replica with the same sandboxes, never with a second set. Each
request's answers are kept (:class:`RequestRecord`): what ``load/burst/handover.py`` holds
to "0 handed twice, 0 lost, every request answered".
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import aiohttp

from facade.podspec import DaemonDelivery, SandboxClass, render_pod
from kube import PODS, KubeClient, KubeError
from kube.contract import LABEL_OWNER
from sandman.wire.facade import DEFAULT_CLASS, DEFAULT_TTL_S, CreateSandbox

__all__ = ["DirectDriver", "Driver", "FacadeDriver", "FireStats", "RequestRecord", "schedule"]

Stamp = Callable[[str, float, float], None]  # (sandbox id, requested, created)


@dataclass(slots=True)
class FireStats:
    sent: int = 0  # HTTP requests sent, retries included
    created: int = 0
    throttled: int = 0  # 429 answers the driver saw (and retried)
    failures: dict[str, int] = field(default_factory=dict)  # reason → sandboxes given up


class Driver(Protocol):
    stats: FireStats

    async def fire(self, n: int, window_s: float, now: Callable[[], float], stamp: Stamp) -> None:
        """Request ``n`` sandboxes evenly over ``window_s`` seconds."""

    async def release(self) -> None:
        """Release every sandbox of this run (one request)."""

    async def close(self) -> None: ...


def schedule(n: int, window_s: float, per_request: int) -> list[tuple[float, int]]:
    """(send time, sandboxes) for each request: ⌈n / per_request⌉ requests evenly spread
    over ``window_s``, the first at 0."""
    count = math.ceil(n / per_request)
    step = window_s / count if count else 0.0
    out, left = [], n
    for k in range(count):
        size = min(per_request, left)
        out.append((k * step, size))
        left -= size
    return out


async def _paced(
    plan: list[tuple[float, int]],
    now: Callable[[], float],
    send: Callable[[int, int], Coroutine[Any, Any, None]],
) -> None:
    """Start ``send(k, size)`` at each planned time, concurrently; wait for all."""
    async with asyncio.TaskGroup() as tg:
        for k, (at, size) in enumerate(plan):
            delay = at - now()
            if delay > 0:
                await asyncio.sleep(delay)
            tg.create_task(send(k, size))


@dataclass(slots=True)
class RequestRecord:
    """One burst request as the trainer saw it: every attempt under its one Idempotency-Key.

    ``ids`` are the sandboxes its answers named, in order of first appearance; ``changed``
    counts ids an earlier answer named and a later one did not (a retry must answer the same
    sandboxes: 0). ``failed`` holds the members the last answer refused, by reason (a typed
    error, counted, not lost); ``gave_up`` says why the request ended without an answer."""

    k: int
    size: int
    key: str
    requested: float
    answered: float | None = None
    ids: list[str] = field(default_factory=list)
    failed: dict[str, int] = field(default_factory=dict)
    replicas: list[str] = field(default_factory=list)  # the replica of each attempt
    moved: int = 0  # attempts sent to another replica after a connection error
    interrupted: int = 0  # of those, connections lost with the request in flight
    changed: int = 0
    gave_up: str = ""


class _ConnectionLost(Exception):
    """A request's connection failed: ``refused`` (nothing was sent) or lost in flight."""

    def __init__(self, replica: str, refused: bool, cause: BaseException) -> None:
        super().__init__(f"{replica}: {cause!r}")
        self.refused = refused


@dataclass(slots=True)
class FacadeDriver:
    """Batch creates through the facade, as a trainer would: one Idempotency-Key per
    request, kept by every attempt (a retry is the same request, so it gets the same
    sandboxes back), spread over the facade replicas.

    Request ``k`` goes to the ``k``-th live replica in turn; a request whose connection
    fails (its replica died) is sent again at once, same key and count, to the next replica,
    and a replica that failed a connection gets no new request (a trainer's client would
    stop using it as a Service stops routing to it)."""

    url: str
    token: str
    owner: str
    image: str
    batch: int = 100
    max_attempts: int = 20
    #: A per-task image mix: request k asks for ``images[k % len(images)]`` (else ``image``).
    images: tuple[str, ...] = ()
    #: A class mix: request k asks for ``classes[k % len(classes)]`` (else the default).
    classes: tuple[str, ...] = ()
    #: Every facade replica's URL (empty: ``url`` alone).
    replicas: tuple[str, ...] = ()
    #: Awaited after each request's final answer (the kills are timed on the answers).
    on_answer: Callable[[], Coroutine[Any, Any, None]] | None = None
    stats: FireStats = field(default_factory=FireStats)
    records: list[RequestRecord] = field(default_factory=list)
    #: Replicas a connection failed on; in flight: requests sent to each, unanswered yet.
    down: set[str] = field(default_factory=set)
    in_flight: dict[str, int] = field(default_factory=dict)
    _session: aiohttp.ClientSession | None = None

    @property
    def urls(self) -> tuple[str, ...]:
        return self.replicas or (self.url,)

    @property
    def answered(self) -> int:
        """Requests with a final answer."""
        return sum(1 for r in self.records if r.answered is not None)

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {self.token}"},
                connector=aiohttp.TCPConnector(limit=256),
                timeout=aiohttp.ClientTimeout(total=300),
            )
        return self._session

    def _replica(self, turn: int) -> str:
        live = [u for u in self.urls if u not in self.down] or list(self.urls)
        return live[turn % len(live)]

    def _spec(self, k: int = 0) -> dict[str, Any]:
        return {
            "image": self.images[k % len(self.images)] if self.images else self.image,
            "class": self.classes[k % len(self.classes)] if self.classes else DEFAULT_CLASS,
            "owner": self.owner,
            "ttl_s": DEFAULT_TTL_S,
        }

    async def fire(self, n: int, window_s: float, now: Callable[[], float], stamp: Stamp) -> None:
        async def send(k: int, size: int) -> None:
            record = RequestRecord(k, size, f"{self.owner}-{k}", now())
            self.records.append(record)
            await self._request(record, now, stamp)
            if self.on_answer is not None and record.answered is not None:
                await self.on_answer()

        await _paced(schedule(n, window_s, self.batch), now, send)

    async def _request(self, r: RequestRecord, now: Callable[[], float], stamp: Stamp) -> None:
        """Every attempt of request ``r`` until an answer without failed members, a typed
        refusal, or ``max_attempts``; the last answer's failed members are its typed errors,
        and a request whose last attempt got no answer (a connection, a 429) gave up."""
        turn, last = r.k, ""
        for _ in range(self.max_attempts):
            replica = self._replica(turn)
            if replica in self.down:  # every replica failed a connection: give them a moment
                await asyncio.sleep(0.2)
            r.replicas.append(replica)
            self.stats.sent += 1
            try:
                status, body, retry_after = await self._post(replica, r.size, r.key, r.k)
            except _ConnectionLost as e:
                self.down.add(replica)
                r.moved, r.interrupted = r.moved + 1, r.interrupted + (not e.refused)
                turn, last = turn + 1, "connection-lost"
                continue
            if status == 429:
                self.stats.throttled += 1
                last = "throttled"
                await asyncio.sleep(retry_after)
                continue
            last = "answer"
            if status >= 300:
                reason = (body.get("error") or {}).get("reason", str(status))
                r.failed = {reason: r.size - len(r.ids)}
                break
            if not self._answer(r, body, now(), stamp):
                break
            await asyncio.sleep(1.0)
        if last == "answer":
            r.answered = now()
            for reason, count in r.failed.items():
                self._fail(reason, count)
        else:
            r.gave_up = f"gave-up ({last or 'no attempt'})"
            self._fail(r.gave_up, r.size - len(r.ids))

    def _answer(self, r: RequestRecord, body: dict[str, Any], t: float, stamp: Stamp) -> int:
        """Take one answer of ``r``: stamp the sandboxes it names first, count the earlier
        ones it no longer names; returns how many members it left failed."""
        items = body.get("sandboxes", [body])
        ids = [sb["id"] for sb in items]
        r.changed += len(set(r.ids) - set(ids))
        for sid in ids:
            if sid not in r.ids:
                r.ids.append(sid)
                stamp(sid, r.requested, t)
                self.stats.created += 1
        failed = body.get("failed") or []
        r.failed = {}
        for f in failed:
            reason = str(f.get("reason") or f.get("status") or "unknown")
            r.failed[reason] = r.failed.get(reason, 0) + 1
        self.stats.throttled += sum(
            1 for f in failed if f.get("reason") in ("rate_limited", "quota_exceeded")
        )
        return len(failed)

    async def _post(
        self, replica: str, size: int, key: str, k: int = 0
    ) -> tuple[int, dict[str, Any], float]:
        headers = {"Idempotency-Key": key}
        if self.batch == 1:
            path, payload = "/v1/sandboxes", self._spec(k)
        else:
            path, payload = "/v1/batches", {"spec": self._spec(k), "count": size}
        self.in_flight[replica] = self.in_flight.get(replica, 0) + 1
        try:
            async with self._http().post(replica + path, json=payload, headers=headers) as resp:
                body = await resp.json(content_type=None)
                retry_after = float(resp.headers.get("Retry-After") or 1.0)
                return resp.status, body if isinstance(body, dict) else {}, retry_after
        except aiohttp.ClientConnectorError as e:
            raise _ConnectionLost(replica, True, e) from e
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
            raise _ConnectionLost(replica, False, e) from e
        finally:
            self.in_flight[replica] -= 1

    def _fail(self, reason: str, n: int) -> None:
        if n > 0:
            self.stats.failures[reason] = self.stats.failures.get(reason, 0) + n

    async def release(self) -> None:
        """Through a replica no connection failed on."""
        url = self._replica(0) + "/v1/sandboxes"
        async with self._http().delete(url, params={"owner": self.owner}) as resp:
            if resp.status >= 300:
                raise RuntimeError(f"release by owner: HTTP {resp.status} {await resp.text()}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@dataclass(slots=True)
class DirectDriver:
    """Creates the sandbox pods through the Kubernetes API (no facade in the path)."""

    client: KubeClient  # Sandman's service account: the creates spend its budget
    namespace: str
    tenant: str
    owner: str
    image: str
    scheduler_name: str = ""  # "" keeps the contract's (sandman)
    stats: FireStats = field(default_factory=FireStats)

    def render(self, i: int) -> dict[str, Any]:
        name = f"{self.owner}-{i:05d}"
        pod = render_pod(
            CreateSandbox(image=self.image, owner=self.owner),
            SandboxClass(DEFAULT_CLASS),
            DaemonDelivery("local-process", python=(sys.executable,)),
            name=name,
            namespace=self.namespace,
            tenant=self.tenant,
            token="unused-virtual-kubelets-run-nothing",
            now=datetime.now(UTC),
        )
        if self.scheduler_name:
            pod["spec"]["schedulerName"] = self.scheduler_name
        return pod

    async def fire(self, n: int, window_s: float, now: Callable[[], float], stamp: Stamp) -> None:
        pods = [self.render(i) for i in range(n)]  # rendered before the clock starts

        async def send(k: int, _size: int) -> None:
            pod = pods[k]
            requested = now()
            self.stats.sent += 1
            try:
                await self.client.create(PODS, pod, self.namespace)
            except KubeError as e:
                self.stats.failures[e.reason or type(e).__name__] = (
                    self.stats.failures.get(e.reason or type(e).__name__, 0) + 1
                )
                return
            self.stats.created += 1
            stamp(pod["metadata"]["name"], requested, now())

        await _paced(schedule(n, window_s, 1), now, send)

    async def release(self) -> None:
        await self.client.delete_collection(
            PODS, self.namespace, label_selector=f"{LABEL_OWNER}={self.owner}"
        )

    async def close(self) -> None:
        return None
