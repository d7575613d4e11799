"""One pooled HTTP connection to the facade, with typed errors and retries for safe calls.

aiohttp, not httpx: the measured client CPU per small request on loopback is ~0.1 ms against
0.7-2.5 ms (docs/benchmarks/controller.md, the controller's client), and a trainer creating
and polling thousands of sandboxes is on a hot path. The session is created lazily inside the
running event loop, so an ``AsyncSandman`` can be constructed anywhere.

Which calls are retried is the caller's decision (``idempotent=True``): GET, DELETE, the lease
PUT and creates that carry an Idempotency-Key. Never exec: a command that may have run must
not silently run twice.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import Mapping
from typing import TypeVar

import aiohttp
import msgspec

from sandman.sdk.daemon_client import parse_error

from .errors import (
    ClientReason,
    ConnectionFailed,
    RetriableError,
    SandmanError,
    ServerError,
    error_for,
)
from .settings import Limits, RetryPolicy, Timeouts

__all__ = ["Transport"]

log = logging.getLogger("sandman.sdk")
T = TypeVar("T")


class Transport:
    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeouts: Timeouts,
        limits: Limits,
        retry: RetryPolicy,
        user_agent: str = "sandman-sdk",
        ca_file: str | None = None,
    ) -> None:
        self.url = url
        #: Checked against this CA bundle for an https:// facade (None: the system's).
        self.ca_file = ca_file
        self.token = token
        self.timeouts = timeouts
        self.limits = limits
        self.retry = retry
        self._headers = {"Authorization": f"Bearer {token}", "User-Agent": user_agent}
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._rng = random.Random()

    @property
    def session(self) -> aiohttp.ClientSession:
        """The shared session (tool calls use it too); created on first use."""
        if self._closed:
            raise RuntimeError("this Sandman client is closed")
        if self._session is None:
            tls = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else True
            connector = aiohttp.TCPConnector(
                limit=self.limits.max_connections,
                keepalive_timeout=self.limits.keepalive_s,
                ssl=tls,
            )
            # No total timeout on the session: every call sets its own bound.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeouts.connect_s)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, headers=self._headers
            )
        return self._session

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        result: type[T],
        *,
        body: object = None,
        params: Mapping[str, str | list[str]] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool,
        timeout_s: float | None = None,
    ) -> T:
        """Decode the answer as ``result``; retry ``RetriableError`` if ``idempotent``."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._once(method, path, result, body, params, headers, timeout_s)
            except RetriableError as e:
                delay = self.retry_delay(attempt, e) if idempotent else None
                if delay is None:
                    raise
                log.info("%s %s: %s; retry %d in %.2f s", method, path, e, attempt, delay)
                await asyncio.sleep(delay)

    def retry_delay(self, attempt: int, error: SandmanError) -> float | None:
        """Seconds before retrying after failed attempt ``attempt``; None: give up.

        The one decision for every SDK retry loop (requests here, batch members in
        ``AsyncSandman.create_many``): :meth:`RetryPolicy.retry_delay`."""
        return self.retry.retry_delay(attempt, error.retry_after_s, self._rng)

    async def _once(
        self,
        method: str,
        path: str,
        result: type[T],
        body: object,
        params: Mapping[str, str | list[str]] | None,
        headers: Mapping[str, str] | None,
        timeout_s: float | None,
    ) -> T:
        total = timeout_s if timeout_s is not None else self.timeouts.request_s
        timeout = aiohttp.ClientTimeout(total=total, sock_connect=self.timeouts.connect_s)
        data = msgspec.json.encode(body) if body is not None else None
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        try:
            async with self.session.request(
                method,
                self.url + path,
                data=data,
                params=_query(params),
                headers=all_headers,
                timeout=timeout,
            ) as response:
                raw = await response.read()
                status, response_headers = response.status, response.headers
        except (aiohttp.ClientError, TimeoutError) as e:
            raise ConnectionFailed(
                f"{method} {path}: {type(e).__name__}: {e}", reason=ClientReason.CONNECTION_FAILED
            ) from e
        if status >= 400:
            raise _error(status, raw, response_headers)
        try:
            return msgspec.json.decode(raw, type=result)
        except msgspec.DecodeError as e:
            raise ServerError(
                f"{method} {path}: {e}", reason=ClientReason.INVALID_RESPONSE, status=status
            ) from e


def _query(params: Mapping[str, str | list[str]] | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in (params or {}).items():
        for item in [value] if isinstance(value, str) else value:
            out.append((key, item))
    return out


def _error(status: int, raw: bytes, headers: Mapping[str, str]) -> Exception:
    reason, message = parse_error(raw)
    return error_for(status, reason, message, headers)
