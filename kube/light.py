"""A light Kubernetes client for processes on every node: asyncio and the lean pool, no
kr8s and no aiohttp.

Why a second client: the node agent runs once per node under a 50 MiB RSS budget, and
``KubeClient``'s libraries alone cost ~40 MiB (kr8s brings httpx, rich, cryptography and a
JSONPath engine; aiohttp ~14 MiB). What the agent needs of the API server is small — a
watch on one object, a merge patch every few seconds, an Event now and then — and this layer
already has a transport for small JSON requests (:mod:`kube.lean`) and the watch stream's
decoding (:mod:`kube.watch`). The rest is here: credentials from a kubeconfig or the pod's
service account (:mod:`kube.credentials`), ``KubeClient``'s retry rule and loop
(:mod:`kube.retry`: Retry-After as a floor, only safe requests repeated, a 401 re-reads the
token), the same token bucket and error hierarchy, and a streaming watch over its own
connection.

It implements :class:`kube.watch.ApiClient`, so :class:`kube.informer.Informer` runs over
it unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl as ssl_module
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlencode, urlsplit

import msgspec

from kube.credentials import Credentials, load_credentials
from kube.errors import TransportError, error_from_status
from kube.lean import LeanPool
from kube.ratelimit import TokenBucket
from kube.resources import Resource
from kube.retry import RetryRule, send_with_retries
from kube.settings import ClientSettings
from kube.verbs import JSON, Verbs, selectors
from kube.watch import LineSplitter, WatchEvent

__all__ = ["LightClient"]

_MAX_HEAD = 64 * 1024


class LightClient(Verbs):
    """Use :meth:`connect`; ``async with`` closes the connections."""

    def __init__(self, credentials: Credentials, settings: ClientSettings) -> None:
        self.credentials = credentials
        self.settings = settings
        self.retry = RetryRule.for_client(settings)
        self.bucket = TokenBucket(settings.qps, settings.burst)
        self._rng = random.Random()
        self._decoder = msgspec.json.Decoder()
        url = urlsplit(credentials.server)
        self._base_path = url.path.rstrip("/")
        self._pool = LeanPool.for_client(
            credentials.server, credentials.ssl, credentials.tls_server_name, settings
        )

    @classmethod
    async def connect(
        cls,
        settings: ClientSettings | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
    ) -> LightClient:
        """Credentials as kubectl finds them: ``kubeconfig``, ``$KUBECONFIG``, ~/.kube/config,
        or the pod's service account."""
        return cls(load_credentials(kubeconfig, context), settings or ClientSettings())

    async def close(self) -> None:
        self._pool.close()

    async def __aenter__(self) -> LightClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def namespace(self) -> str:
        return self.credentials.namespace

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
    ) -> Any:
        """One request with rate limiting and ``KubeClient``'s retry rule; the decoded JSON."""
        data = b"" if body is None else msgspec.json.encode(body)
        target = self._base_path + path + (f"?{urlencode(query)}" if query else "")
        return await send_with_retries(
            self.retry,
            lambda: self._once(method, target, data, content_type),
            safe=self.retry.is_safe(method, idempotent),
            rng=self._rng,
            pace=self._pace,
            reauthenticate=self._reload_token,
        )

    async def _pace(self) -> None:
        await asyncio.sleep(self.bucket.reserve())

    async def _reload_token(self) -> None:
        self.credentials.reload_token()  # a rotated service-account token

    async def _once(self, method: str, target: str, data: bytes, content_type: str) -> Any:
        headers = {**self.credentials.headers(), "Accept": JSON}
        if data:
            headers["Content-Type"] = content_type
        try:
            code, resp_headers, raw = await self._pool.request(
                method, target, headers, data, self.settings.timeouts.request_s
            )
        except TransportError as e:
            raise TransportError(f"{method} {target}: {e}", sent=e.sent) from e
        if code < 300:
            return self._decoder.decode(raw) if raw else None
        raise error_from_status(
            code, self._decode_error(raw), resp_headers.get("retry-after"), what=target
        )

    # --- verbs --------------------------------------------------------------------------
    async def delete(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        return await self.request("DELETE", res.path(namespace, name))

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
        """Like ``KubeClient.watch``: the stream ends when the server closes it; no bytes for
        ``timeouts.watch_idle_s`` raises :class:`TransportError`; ERROR events raise. Opening
        the stream is rate limited and retried like any GET."""
        query = selectors(label_selector, field_selector)
        query.update(
            watch="true",
            resourceVersion=resource_version,
            timeoutSeconds=str(timeout_seconds),
            allowWatchBookmarks="true" if bookmarks else "false",
        )
        target = f"{self._base_path}{res.path(namespace)}?{urlencode(query)}"
        reader, writer = await send_with_retries(
            self.retry,
            lambda: self._open(target),
            safe=self.retry.is_safe("GET"),
            rng=self._rng,
            pace=self._pace,
            reauthenticate=self._reload_token,
        )
        try:
            yield self._events(reader)
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl_module.SSLError):
                async with asyncio.timeout(1.0):
                    await writer.wait_closed()

    async def _open(self, target: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        c, timeouts = self.credentials, self.settings.timeouts
        url = urlsplit(c.server)
        tls = url.scheme == "https"
        try:
            async with asyncio.timeout(timeouts.connect_s):
                reader, writer = await asyncio.open_connection(
                    url.hostname,
                    url.port or (443 if tls else 80),
                    ssl=c.ssl if tls else None,
                    server_hostname=(c.tls_server_name or url.hostname) if tls else None,
                    limit=2**22,
                )
        except (OSError, TimeoutError) as e:
            raise TransportError(f"WATCH {target}: cannot connect: {e}", sent=False) from e
        head = "".join(f"{k}: {v}\r\n" for k, v in c.headers().items())
        writer.write(
            f"GET {target} HTTP/1.1\r\nHost: {url.netloc}\r\nAccept: {JSON}\r\n"
            f"User-Agent: {self.settings.user_agent}\r\n{head}\r\n".encode("latin-1")
        )
        try:
            async with asyncio.timeout(timeouts.request_s):
                status, headers = await _read_head(reader)
                if status >= 300:
                    raw = await reader.read(_MAX_HEAD)
                    raise error_from_status(
                        status, self._decode_error(raw), headers.get("retry-after"), what=target
                    )
        except BaseException:
            writer.close()
            raise
        if headers.get("transfer-encoding", "").lower() != "chunked":
            writer.close()
            raise TransportError(f"WATCH {target}: not a chunked stream")
        return reader, writer

    async def _events(self, reader: asyncio.StreamReader) -> AsyncIterator[WatchEvent]:
        lines, idle = LineSplitter(), self.settings.timeouts.watch_idle_s
        try:
            while True:
                async with asyncio.timeout(idle):
                    size_line = await reader.readline()
                    size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        return
                    chunk = await reader.readexactly(size + 2)
                for ev in lines.feed(chunk[:-2]):
                    yield ev
        except TimeoutError as e:
            raise TransportError(f"watch stream idle for {idle:g} s") from e
        except (OSError, ValueError, asyncio.IncompleteReadError) as e:
            raise TransportError(f"watch stream broke: {type(e).__name__}: {e}") from e


async def _read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as e:
        raise TransportError(f"bad response head: {type(e).__name__}") from e
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
        raise TransportError(f"not an HTTP/1.x response: {lines[0][:40]!r}")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    return int(rest[:3]), headers
