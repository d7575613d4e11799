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
sandbox's original ``requested`` time (the trainer asked then).
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

__all__ = ["DirectDriver", "Driver", "FacadeDriver", "FireStats", "schedule"]

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
class FacadeDriver:
    """Batch creates through the facade, as a trainer would."""

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
    stats: FireStats = field(default_factory=FireStats)
    _session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                base_url=self.url,
                headers={"Authorization": f"Bearer {self.token}"},
                connector=aiohttp.TCPConnector(limit=256),
                timeout=aiohttp.ClientTimeout(total=300),
            )
        return self._session

    def _spec(self, k: int = 0) -> dict[str, Any]:
        return {
            "image": self.images[k % len(self.images)] if self.images else self.image,
            "class": self.classes[k % len(self.classes)] if self.classes else DEFAULT_CLASS,
            "owner": self.owner,
            "ttl_s": DEFAULT_TTL_S,
        }

    async def fire(self, n: int, window_s: float, now: Callable[[], float], stamp: Stamp) -> None:
        async def send(k: int, size: int) -> None:
            await self._request(k, size, now(), now, stamp)

        await _paced(schedule(n, window_s, self.batch), now, send)

    async def _request(
        self, k: int, size: int, requested: float, now: Callable[[], float], stamp: Stamp
    ) -> None:
        attempt = 0
        while size > 0 and attempt < self.max_attempts:
            attempt += 1
            key = f"{self.owner}-{k}-{attempt}"
            self.stats.sent += 1
            status, body, retry_after = await self._post(size, key, k)
            if status == 429:
                self.stats.throttled += 1
                await asyncio.sleep(retry_after)
                continue
            if status >= 300:
                reason = (body.get("error") or {}).get("reason", str(status))
                self._fail(reason, size)
                return
            t = now()
            items = body.get("sandboxes", [body])
            for sb in items:
                stamp(sb["id"], requested, t)
            self.stats.created += len(items)
            failed = body.get("failed") or []
            size = len(failed)
            if failed:
                self.stats.throttled += sum(
                    1 for f in failed if f.get("reason") in ("rate_limited", "quota_exceeded")
                )
                await asyncio.sleep(1.0)
        if size:
            self._fail("gave-up", size)

    async def _post(self, size: int, key: str, k: int = 0) -> tuple[int, dict[str, Any], float]:
        headers = {"Idempotency-Key": key}
        if self.batch == 1:
            path, payload = "/v1/sandboxes", self._spec(k)
        else:
            path, payload = "/v1/batches", {"spec": self._spec(k), "count": size}
        async with self._http().post(path, json=payload, headers=headers) as resp:
            body = await resp.json(content_type=None)
            retry_after = float(resp.headers.get("Retry-After") or 1.0)
            return resp.status, body if isinstance(body, dict) else {}, retry_after

    def _fail(self, reason: str, n: int) -> None:
        self.stats.failures[reason] = self.stats.failures.get(reason, 0) + n

    async def release(self) -> None:
        async with self._http().delete("/v1/sandboxes", params={"owner": self.owner}) as resp:
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
