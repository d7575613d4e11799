"""Sandman's one Kubernetes client: kr8s for configuration, aiohttp for requests.

Why two libraries behind one object: kr8s knows every way a process finds its cluster
(kubeconfig contexts, exec/OIDC tokens, in-cluster service account) and is the right tool for
that; its httpx transport costs ~0.7-2.5 ms of CPU per request, while an aiohttp session costs
~0.1 ms (docs/controller.md, "The client"). Binds, creates and watch events number in the
thousands per burst, so :class:`KubeClient` loads credentials through kr8s and sends every
request over one aiohttp session built from them, adding what kr8s lacks:

- explicit timeouts and a connection limit (:class:`ClientSettings`);
- a client-side token bucket shared by all requests (:class:`TokenBucket`);
- retries as the layer's one rule says (:mod:`kube.retry`, shared with the light client):
  429 always (the server did not run the request) and never sooner than its Retry-After,
  connection failures before sending always, 5xx and timeouts only when the request is safe
  to repeat, with the backoff every Sandman retry loop shares;
- one error hierarchy (:mod:`kube.errors`) and msgspec JSON decoding;
- a watch stream with an idle timeout (see :meth:`KubeClient.watch`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit

import aiohttp
import kr8s.asyncio
import msgspec

from kube.errors import (
    KubeError,
    SendDeadlinePassed,
    TooManyRequests,
    TransportError,
    error_from_status,
    from_kr8s,
)
from kube.lean import LeanPool
from kube.ratelimit import AdaptivePacer, TokenBucket
from kube.resources import PODS, Resource
from kube.retry import RetryRule, send_with_retries
from kube.settings import ClientSettings
from kube.verbs import JSON, Verbs, selectors
from kube.watch import LineSplitter, WatchEvent

__all__ = ["KubeClient", "RequestObserver", "WatchEvent"]

#: Failures before the request was written: always safe to repeat.
_NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


class RequestObserver(Protocol):
    """Told about every HTTP attempt (metrics): verb, HTTP code (0 = none), seconds."""

    def __call__(self, verb: str, code: int, seconds: float) -> None: ...


def _verb(method: str, path: str, query: Mapping[str, str] | None) -> str:
    if query and query.get("watch") == "true":
        return "WATCH"
    if method == "GET" and not _names_object(path):
        return "LIST"
    return method


def _names_object(path: str) -> bool:
    """``.../pods/<name>`` (odd depth after the group/version prefix) vs ``.../pods``."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    return len(rest) >= 2


class KubeClient(Verbs):
    """Use :meth:`connect`; ``async with`` closes the sessions."""

    def __init__(
        self,
        api: kr8s.asyncio.Api,
        session: aiohttp.ClientSession,
        ssl: Any,
        settings: ClientSettings,
        observer: RequestObserver | None = None,
    ) -> None:
        self.kr8s = api
        self.settings = settings
        self.observer = observer
        self.retry = RetryRule.for_client(settings)
        self.bucket = TokenBucket(settings.qps, settings.burst)
        self.pacer = AdaptivePacer(self.bucket, settings.pacer)
        self._session = session
        self._ssl = ssl
        self._base = str(api.auth.server).rstrip("/")
        self._base_path = urlsplit(self._base).path
        self._server_hostname = api.auth.tls_server_name or None
        #: ``Impersonate-User`` of a derived client (:meth:`impersonating`); none by default.
        self._impersonation: dict[str, str] = {}
        self._headers = self._auth_headers()
        # sock_connect, not connect: aiohttp's ``connect`` also covers waiting for a free
        # pooled connection, which under a burst is queueing, not a dead server.
        self._timeout = aiohttp.ClientTimeout(
            total=settings.timeouts.request_s, sock_connect=settings.timeouts.connect_s
        )
        self._decoder = msgspec.json.Decoder()
        self._rng = random.Random()
        self._owns_session = True
        # Binds go over a transport of their own (lean.py): a tenth of aiohttp's CPU each.
        self._lean = LeanPool.for_client(self._base, ssl, self._server_hostname, settings)

    @classmethod
    async def connect(
        cls,
        settings: ClientSettings | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        observer: RequestObserver | None = None,
    ) -> KubeClient:
        """Load credentials the way kubectl does (kubeconfig/``$KUBECONFIG``/in-cluster)."""
        settings = settings or ClientSettings()
        try:
            api = await kr8s.asyncio.api(kubeconfig=kubeconfig, context=context)
            api.timeout = settings.timeouts.request_s
            ssl = await api.auth.ssl_context()
        except Exception as e:
            raise from_kr8s(e) from e
        connector = aiohttp.TCPConnector(limit=settings.max_connections, ssl=ssl)
        session = aiohttp.ClientSession(
            connector=connector, headers={"User-Agent": settings.user_agent}
        )
        return cls(api, session, ssl, settings, observer)

    def with_rate_limit(
        self, qps: float, burst: int, *, max_attempts: int | None = None
    ) -> KubeClient:
        """The same connections and credentials behind a token bucket of its own (and
        ``max_attempts`` of its own, if given).

        For traffic that must never queue behind a burst of binds — leader election: a
        renewal stuck behind 128 binds at 100 QPS would miss its deadline (client-go gives
        leader election its own client for the same reason)."""
        derived = copy.copy(self)
        if max_attempts is not None:
            derived.settings = dataclasses.replace(self.settings, max_attempts=max_attempts)
            derived.retry = RetryRule.for_client(derived.settings)
        derived.bucket = TokenBucket(qps, burst)
        derived.pacer = AdaptivePacer(derived.bucket, self.settings.pacer)
        derived._owns_session = False
        return derived

    def impersonating(self, user: str) -> KubeClient:
        """The same connections, credentials and token bucket, sending every request as
        ``user`` (``Impersonate-User``; the credentials need ``impersonate`` on it).

        For writes that must be classified apart by API Priority and Fairness — the pool
        filler's creates under a FlowSchema of their own (controller/pools.py) — without a
        second credential to mount and rotate."""
        derived = copy.copy(self)
        derived._impersonation = {"Impersonate-User": user}
        derived._headers = derived._auth_headers()
        derived._owns_session = False
        return derived

    async def take_tokens(self, n: int) -> None:
        """Wait until ``n`` requests may go (the first attempt of each then ``prepaid``):
        what must be sent right after a decision — a pre-placed batch — waits for its
        turn *before* the decision, not after it."""
        delay = 0.0
        for _ in range(n):
            delay = self.bucket.reserve()
        if delay > 0:
            await asyncio.sleep(delay)

    def _auth_headers(self) -> dict[str, str]:
        return {**self.bearer_headers(), **self._impersonation}

    def bearer_headers(self) -> dict[str, str]:
        token = self.kr8s.auth.token
        return {"Authorization": f"Bearer {token}"} if token else {}

    async def close(self) -> None:
        if not self._owns_session:
            return
        self._lean.close()
        await self._session.close()
        session = getattr(self.kr8s, "_session", None)
        if session is not None:
            await session.aclose()
            self.kr8s._session = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def namespace(self) -> str:
        """The namespace of the kubeconfig context (or the pod's own, in-cluster)."""
        return str(self.kr8s.namespace or "default")

    # --- requests -----------------------------------------------------------------------
    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        idempotent: bool | None = None,
        lean: bool = False,
        send_by: float | None = None,
        prepaid: bool = False,
    ) -> Any:
        """Send one request with rate limiting and retries (:mod:`kube.retry`); return the
        decoded JSON body.

        ``idempotent`` (default: by method; POST is not) allows repeating the request after
        a 5xx or a timeout, where it may already have taken effect. ``lean``: over the lean
        transport (the binds and pre-placed creates). ``send_by`` (``time.monotonic()``): no
        attempt is sent after it — :class:`SendDeadlinePassed` instead (a pre-placed create
        must not land after its placement ran out); over the lean transport it is checked
        again with the connection in hand, after any wait for one. ``prepaid``: the first
        attempt's token was taken already (:meth:`take_tokens`)."""
        data = None if body is None else msgspec.json.encode(body)
        headers = {**self._headers, "Content-Type": content_type, "Accept": JSON}
        verb = _verb(method, path, query)
        target = self._lean_target(path, query) if lean else path
        unpaid = not prepaid

        async def pace() -> None:
            nonlocal unpaid
            if unpaid:
                await self.bucket.acquire()
            unpaid = True

        async def attempt() -> Any:
            if send_by is not None and time.monotonic() > send_by:
                raise SendDeadlinePassed(f"{method} {path}: not sent, its deadline passed")
            sent = self.pacer.now()
            try:
                if lean:
                    answer = await self._lean_once(method, verb, target, data, headers, send_by)
                else:
                    answer = await self._once(method, verb, path, query, data, headers)
            except TooManyRequests:
                self.pacer.throttled(sent)
                raise
            except KubeError as e:
                if e.status:  # the server answered (404, 409, 5xx...): it spent budget on it
                    self.pacer.answered(self.pacer.now() - sent)
                raise
            self.pacer.answered(self.pacer.now() - sent)
            return answer

        async def reauthenticate() -> None:  # a rotated token (bound service account tokens)
            headers.update(await self._reauthenticate())

        return await send_with_retries(
            self.retry,
            attempt,
            safe=self.retry.is_safe(method, idempotent),
            rng=self._rng,
            pace=pace,
            reauthenticate=reauthenticate,
        )

    async def _once(
        self,
        method: str,
        verb: str,
        path: str,
        query: Mapping[str, str] | None,
        data: bytes | None,
        headers: Mapping[str, str],
    ) -> Any:
        start = time.perf_counter()
        code = 0
        try:
            async with self._session.request(
                method,
                self._base + path,
                params=query,
                data=data,
                headers=headers,
                timeout=self._timeout,
                server_hostname=self._server_hostname,
            ) as resp:
                code = resp.status
                raw = await resp.read()
        except _NOT_SENT as e:
            raise TransportError(f"{method} {path}: cannot connect: {e}", sent=False) from e
        except (aiohttp.ClientError, TimeoutError) as e:
            raise TransportError(f"{method} {path}: {type(e).__name__}: {e}") from e
        finally:
            if self.observer is not None:
                self.observer(verb, code, time.perf_counter() - start)
        if code < 300:
            return self._decoder.decode(raw) if raw else None
        raise error_from_status(
            code, self._decode_error(raw), resp.headers.get("Retry-After"), what=f"{method} {path}"
        )

    async def _lean_once(
        self,
        method: str,
        verb: str,
        target: str,
        data: bytes | None,
        headers: Mapping[str, str],
        send_by: float | None = None,
    ) -> Any:
        """One attempt over the lean pool; ``target``: the path under the server's URL, with
        the query."""
        start = time.perf_counter()
        try:
            code, resp_headers, raw = await self._lean.request(
                method, target, headers, data or b"", self.settings.timeouts.request_s, send_by
            )
        except SendDeadlinePassed:
            raise  # never sent: not a request to observe
        except TransportError as e:
            self._observe(verb, 0, start)
            raise TransportError(f"{method} {target}: {e}", sent=e.sent) from e
        except BaseException:
            self._observe(verb, 0, start)
            raise
        self._observe(verb, code, start)
        if code < 300:
            return self._decoder.decode(raw) if raw else None
        raise error_from_status(
            code,
            self._decode_error(raw),
            resp_headers.get("retry-after"),
            what=f"{method} {target}",
        )

    def _lean_target(self, path: str, query: Mapping[str, str] | None) -> str:
        """The request target the lean pool sends: the server URL's own path (a proxy's
        prefix), the API path, the query."""
        return self._base_path + path + (f"?{urlencode(query)}" if query else "")

    def _observe(self, verb: str, code: int, start: float) -> None:
        if self.observer is not None:
            self.observer(verb, code, time.perf_counter() - start)

    async def _reauthenticate(self) -> dict[str, str]:
        try:
            await self.kr8s.auth.reauthenticate()
        except Exception as e:
            raise from_kr8s(e) from e
        self._headers = self._auth_headers()
        return self._headers

    # --- verbs --------------------------------------------------------------------------
    async def replace(
        self, res: Resource, name: str, body: Mapping[str, Any], namespace: str | None = None
    ) -> Any:
        """PUT; optimistic concurrency through ``metadata.resourceVersion`` in ``body``."""
        return await self.request("PUT", res.path(namespace, name), body=body)

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        grace_period_s: int | None = None,
    ) -> Any:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period_s is not None:
            body["gracePeriodSeconds"] = grace_period_s
        return await self.request("DELETE", res.path(namespace, name), body=body)

    async def delete_collection(
        self, res: Resource, namespace: str | None = None, *, label_selector: str
    ) -> Any:
        """DELETE every object matching ``label_selector``; returns the deleted objects."""
        return await self.request(
            "DELETE", res.path(namespace), query=selectors(label_selector, None)
        )

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """POST pods/binding with the pod's uid as precondition.

        Safe to repeat: a repeat after a lost response gets 409 (already bound), and the uid
        precondition stops a bind from landing on a new pod that reused the name."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.request(
            "POST", PODS.path(namespace, name, "binding"), body=body, idempotent=True, lean=True
        )

    # --- watch --------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
    ) -> AsyncIterator[AsyncIterator[WatchEvent]]:
        """``async with client.watch(...) as events: async for ev in events: ...``

        The stream ends when the server closes it (``timeoutSeconds``). No bytes for
        ``timeouts.watch_idle_s`` raises :class:`TransportError`; an ERROR event raises its
        error (:class:`Gone` for 410). Opening the stream is rate limited and retried like
        any GET."""
        query = selectors(label_selector, field_selector)
        query.update(
            watch="true",
            resourceVersion=resource_version,
            timeoutSeconds=str(timeout_seconds),
            allowWatchBookmarks="true" if bookmarks else "false",
        )
        resp = await self._open_stream(res.path(namespace), query)
        try:
            yield self._events(resp)
        finally:
            resp.close()

    async def _open_stream(self, path: str, query: Mapping[str, str]) -> aiohttp.ClientResponse:
        return await send_with_retries(
            self.retry,
            lambda: self._open_once(path, query),
            safe=self.retry.is_safe("GET"),
            rng=self._rng,
            pace=self.bucket.acquire,
            reauthenticate=self._reauthenticate,
        )

    async def _open_once(self, path: str, query: Mapping[str, str]) -> aiohttp.ClientResponse:
        start = time.perf_counter()
        code = 0
        timeout = aiohttp.ClientTimeout(
            total=None,
            sock_connect=self.settings.timeouts.connect_s,
            sock_read=self.settings.timeouts.watch_idle_s,
        )
        try:
            resp = await self._session.get(
                self._base + path,
                params=query,
                headers={**self._headers, "Accept": JSON},
                timeout=timeout,
                server_hostname=self._server_hostname,
            )
            code = resp.status
        except _NOT_SENT as e:
            raise TransportError(f"WATCH {path}: cannot connect: {e}", sent=False) from e
        except (aiohttp.ClientError, TimeoutError) as e:
            raise TransportError(f"WATCH {path}: {type(e).__name__}: {e}") from e
        finally:
            if self.observer is not None:
                self.observer("WATCH", code, time.perf_counter() - start)
        if code >= 300:
            raw = await resp.read()
            resp.close()
            raise error_from_status(
                code, self._decode_error(raw), resp.headers.get("Retry-After"), what=path
            )
        return resp

    async def _events(self, resp: aiohttp.ClientResponse) -> AsyncIterator[WatchEvent]:
        lines = LineSplitter()
        while True:
            try:
                chunk = await resp.content.readany()
            except (aiohttp.ClientError, TimeoutError) as e:
                raise TransportError(f"watch stream broke: {type(e).__name__}: {e}") from e
            if not chunk:
                return
            for ev in lines.feed(chunk):
                yield ev
