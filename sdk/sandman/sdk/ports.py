"""A server inside a sandbox, reached through the facade: ``sandbox.port(8080)``.

An agent starts a web app, a notebook or a language server in its sandbox; the trainer (or a
browser tool, or a test) reaches it at ``sandbox.url(8080)`` with ``sandbox.headers`` — the
facade forwards it through the sandbox's daemon, so no port of the sandbox is opened (docs/
trainer-guide.md, "Ports"). What the server sees: the path and query as sent, its own
``Host``, no ``Authorization`` (the tenant's token stops at the facade).

``AsyncPort`` is the async helper over the SDK's pooled session: ``request`` for an answer
read whole (the blocking SDK has it too), ``open`` for a body streamed either way and
``websocket`` for a WebSocket, both handing out aiohttp's own objects, so async only. Never
retried: a request to an agent's server is not known to be idempotent.
"""

from __future__ import annotations

import contextlib
import io
import json as jsonlib
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from yarl import URL

from sandman.sdk.daemon_client import parse_error
from sandman.wire.errors import REASON_HEADER

from .errors import ClientReason, ConnectionFailed, SandmanError, error_for
from .transport import Transport

__all__ = ["AsyncPort", "PortResponse", "async_only"]

F = TypeVar("F", bound=Callable[..., Any])

Body = bytes | AsyncIterable[bytes] | None


def async_only(method: F) -> F:
    """Marks a method that hands out objects only an event loop can drive (aiohttp's
    responses and WebSockets): the blocking SDK has no twin of it (codegen.blocking); its
    ``async_only`` attribute says so at run time."""
    method.async_only = True  # type: ignore[attr-defined]
    return method


@dataclass(frozen=True, slots=True)
class PortResponse:
    """A forwarded port's answer, read whole: whatever the sandbox's server answered,
    error statuses included (only the facade's and the daemon's own refusals raise)."""

    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return jsonlib.loads(self.body)


class AsyncPort:
    """One port inside one sandbox (cheap: no I/O until a call)."""

    #: The sandbox's id.
    sandbox_id: str
    #: The port the server listens on inside the sandbox.
    port: int

    def __init__(self, transport: Transport, sandbox_id: str, port: int) -> None:
        if not 1 <= port <= 65535:
            raise ValueError(f"port must be from 1 to 65535, not {port}")
        self._transport = transport
        self.sandbox_id = sandbox_id
        self.port = port

    def __repr__(self) -> str:
        return f"<AsyncPort {self.sandbox_id}:{self.port}>"

    @property
    def url(self) -> str:
        """The port's base URL on the facade (a path goes after it)."""
        return f"{self._transport.url}/v1/sandboxes/{self.sandbox_id}/ports/{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        """What a request to :attr:`url` must carry: the tenant's bearer token."""
        return {"Authorization": f"Bearer {self._transport.token}"}

    def _url(self, path: str) -> URL:
        """``path`` (with its query, as encoded by the caller) after the base URL, sent as
        it is: no client normalisation (a ``%2F`` stays one)."""
        if not path.startswith("/"):
            path = "/" + path
        return URL(self.url + path, encoded=True)

    async def request(
        self,
        method: str,
        path: str = "/",
        *,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> PortResponse:
        """Send one request to the server and read its answer whole (``path`` may carry a
        query string: ``"/search?q=x"``)."""
        async with self.open(method, path, data=data, headers=headers, timeout_s=timeout_s) as r:
            body = await r.read()
            return PortResponse(r.status, dict(r.headers), body)

    @async_only
    @contextlib.asynccontextmanager
    async def open(
        self,
        method: str,
        path: str = "/",
        *,
        data: Body = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The answer as aiohttp's response, its body unread (``async for chunk in
        r.content.iter_any()``); ``data`` may be an async iterable of chunks, streamed up."""
        total = timeout_s if timeout_s is not None else self._transport.timeouts.request_s
        timeout = aiohttp.ClientTimeout(
            total=total, sock_connect=self._transport.timeouts.connect_s
        )
        # Bytes as a file: aiohttp sends it with its Content-Length, without copying it whole.
        body = io.BytesIO(data) if isinstance(data, bytes) else data
        try:
            async with self._transport.session.request(
                method,
                self._url(path),
                data=body,
                headers=dict(headers or {}),
                timeout=timeout,
                allow_redirects=False,
            ) as response:
                await _refusal(response)
                yield response
        except (aiohttp.ClientConnectionError, TimeoutError) as e:
            raise _failed(method, path, e) from e

    @async_only
    @contextlib.asynccontextmanager
    async def websocket(
        self,
        path: str = "/",
        *,
        protocols: Sequence[str] = (),
        headers: Mapping[str, str] | None = None,
        heartbeat_s: float | None = None,
    ) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
        """A WebSocket to the server (aiohttp's, closed when the block ends). A refused
        upgrade raises the facade's reason (``upgrade_refused``, ``port_not_listening``...)."""
        try:
            async with self._transport.session.ws_connect(
                self._url(path),
                protocols=tuple(protocols),
                headers=dict(headers or {}),
                heartbeat=heartbeat_s,
            ) as ws:
                yield ws
        except aiohttp.WSServerHandshakeError as e:
            answered: Mapping[str, str] = e.headers if e.headers is not None else {}
            found = answered.get(REASON_HEADER, ClientReason.HTTP_ERROR)
            raise error_for(e.status, found, f"websocket {path}: {e.message}", answered) from e
        except (aiohttp.ClientConnectionError, TimeoutError) as e:
            raise _failed("websocket", path, e) from e


async def _refusal(response: aiohttp.ClientResponse) -> None:
    """Raise the facade's or the daemon's own refusal (an error body with a reason of the
    table and its ``x-sandman-reason``); any other answer is the server's, returned."""
    if response.status < 400 or not response.headers.get(REASON_HEADER, ""):
        return
    reason, message = parse_error(await response.read())
    raise error_for(response.status, reason, message, response.headers)


def _failed(method: str, path: str, e: BaseException) -> SandmanError:
    return ConnectionFailed(
        f"{method} {path}: {type(e).__name__}: {e}", reason=ClientReason.CONNECTION_FAILED
    )
