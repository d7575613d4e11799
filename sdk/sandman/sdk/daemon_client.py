"""An async client for one sandbox daemon, speaking its wire models.

Used by the demo, the benchmarks and the tests, and a reference for anyone calling a daemon
directly. Trainers normally go through the facade and the SDK; this client is the layer below.
It is never imported by the daemon itself (the bundle stays free of aiohttp).

The trainer SDK (``sandman.sdk``) reuses this client for every tool call through the facade:
the facade serves the daemon's operations unchanged under ``/v1/sandboxes/{id}/``, so only the
path ``prefix`` and the exception type (``errors``) differ, and there is one implementation of
each operation, not two. Either way an error answer is a :class:`~sandman.sdk.errors.SandmanError`:
the SDK's typed classes through the facade, a :class:`DaemonAPIError` (retriable as the one
table of reasons says) against a daemon.
"""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import aiohttp
import msgspec

from sandman.wire.daemon import (
    Blob,
    DaemonInfo,
    DirListing,
    ExecEvent,
    ExecRequest,
    ExecResult,
    FileStat,
    MoveRequest,
    ProcessInfo,
    ProcessList,
    ProcessOutput,
    ProcessStartRequest,
    ProcessWaitRequest,
    SessionCreateRequest,
    SessionInfo,
    SessionList,
    SessionRunRequest,
    SessionRunResult,
    SignalRequest,
)
from sandman.wire.errors import decode_error, kind_of

from .errors import ClientReason, SandmanError, parse_retry_after

__all__ = ["ClientTimeouts", "DaemonAPIError", "ErrorFactory", "SandboxClient", "parse_error"]

T = TypeVar("T")
LARGE_BODY = 1 << 20


class DaemonAPIError(SandmanError):
    """The daemon answered with an error: its message, reason and HTTP status; ``retriable``
    as the reason's row of :mod:`sandman.wire.errors` says (its status's, for a reason the
    table lacks)."""

    def __init__(
        self, message: str, *, reason: str, status: int, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, reason=reason, status=status, retry_after_s=retry_after_s)
        self.retriable = kind_of(status, reason).retriable


ErrorFactory = Callable[[int, str, str, Mapping[str, str]], Exception]
"""Builds the exception raised for an error answer: (status, reason, message, headers)."""


def _daemon_error(status: int, reason: str, message: str, headers: Mapping[str, str]) -> Exception:
    retry_after_s = parse_retry_after(headers)
    return DaemonAPIError(message, reason=reason, status=status, retry_after_s=retry_after_s)


@dataclass(frozen=True, slots=True)
class ClientTimeouts:
    connect_s: float = 5.0
    request_s: float = 300.0
    """Upper bound for one call; exec timeouts must stay below it."""


class SandboxClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeouts: ClientTimeouts | None = None,
        session: aiohttp.ClientSession | None = None,
        prefix: str = "/v1",
        errors: ErrorFactory = _daemon_error,
    ) -> None:
        """``prefix``: where the operations live (``/v1`` on a daemon, ``/v1/sandboxes/{id}``
        through the facade); ``errors``: the exception type for error answers."""
        self.base_url = base_url.rstrip("/")
        self._api = self.base_url + prefix.rstrip("/")
        self._errors = errors
        self._headers = {"Authorization": f"Bearer {token}"}
        t = timeouts or ClientTimeouts()
        self._timeout = aiohttp.ClientTimeout(total=t.request_s, connect=t.connect_s)
        self._owns_session = session is None
        self._session = session or aiohttp.ClientSession(timeout=self._timeout)

    async def __aenter__(self) -> SandboxClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_session:
            await self._session.close()

    # -- plumbing --------------------------------------------------------------------------

    def _raise_for(self, response: aiohttp.ClientResponse, raw: bytes) -> None:
        if response.status >= 400:
            reason, message = parse_error(raw)
            raise self._errors(response.status, reason, message, response.headers)

    async def _call(
        self,
        method: str,
        path: str,
        result: type[T] | None,
        body: object = None,
        params: Mapping[str, Any] | None = None,
        data: bytes | AsyncIterator[bytes] | None = None,
    ) -> T:
        payload: Any = msgspec.json.encode(body) if body is not None else data
        if isinstance(payload, bytes) and len(payload) > LARGE_BODY:
            payload = io.BytesIO(payload)  # aiohttp streams file-likes instead of one big write
        async with self._session.request(
            method,
            self._api + path,
            data=payload,
            params=_params(params),
            headers=self._headers,
        ) as response:
            raw = await response.read()
            self._raise_for(response, raw)
            if result is None:
                return None  # type: ignore[return-value]
            return msgspec.json.decode(raw, type=result)

    # -- health and info -------------------------------------------------------------------

    async def healthy(self) -> bool:
        try:
            async with self._session.get(self.base_url + "/healthz") as response:
                return response.status == 200
        except aiohttp.ClientError:
            return False

    async def info(self) -> DaemonInfo:
        return await self._call("GET", "/info", DaemonInfo)

    # -- exec ------------------------------------------------------------------------------

    async def exec(self, request: ExecRequest | None = None, **fields: Any) -> ExecResult:
        """``exec(argv=[...])`` or ``exec(command="...")``; fields as in ``ExecRequest``."""
        request = request or _exec_request(fields)
        return await self._call("POST", "/exec", ExecResult, request)

    async def exec_stream(
        self, request: ExecRequest | None = None, *, resume_from: int = 0, **fields: Any
    ) -> AsyncGenerator[ExecEvent, None]:
        """The events of a streamed exec; ``resume_from=N`` re-attaches to a kept one (same
        request, same ``id``) after the first N output events."""
        request = request or _exec_request(fields)
        async with self._session.post(
            self._api + "/exec/stream",
            data=msgspec.json.encode(request),
            params={"resume_from": str(resume_from)} if resume_from else None,
            headers=self._headers,
        ) as response:
            if response.status != 200:
                self._raise_for(response, await response.read())
            async for line in response.content:
                if line.strip():
                    yield msgspec.json.decode(line, type=ExecEvent)

    async def signal_exec(self, exec_id: str, signal: str = "SIGINT") -> None:
        await self._call("POST", f"/exec/{exec_id}/signal", None, SignalRequest(signal=signal))

    # -- sessions --------------------------------------------------------------------------

    async def create_session(self, name: str, **fields: Any) -> SessionInfo:
        body = SessionCreateRequest(name=name, **fields)
        return await self._call("POST", "/sessions", SessionInfo, body)

    async def run_in_session(self, name: str, command: str, **fields: Any) -> SessionRunResult:
        body = SessionRunRequest(command=command, **fields)
        return await self._call("POST", f"/sessions/{name}/run", SessionRunResult, body)

    async def list_sessions(self) -> SessionList:
        return await self._call("GET", "/sessions", SessionList)

    async def close_session(self, name: str) -> None:
        await self._call("DELETE", f"/sessions/{name}", None)

    # -- background processes --------------------------------------------------------------

    async def start_process(self, **fields: Any) -> ProcessInfo:
        return await self._call("POST", "/processes", ProcessInfo, ProcessStartRequest(**fields))

    async def list_processes(self) -> ProcessList:
        return await self._call("GET", "/processes", ProcessList)

    async def process(self, proc_id: str) -> ProcessInfo:
        return await self._call("GET", f"/processes/{proc_id}", ProcessInfo)

    async def process_output(self, proc_id: str, tail_bytes: int | None = None) -> ProcessOutput:
        params = {"tail_bytes": tail_bytes}
        return await self._call("GET", f"/processes/{proc_id}/output", ProcessOutput, params=params)

    async def signal_process(self, proc_id: str, signal: str = "SIGTERM") -> ProcessInfo:
        body = SignalRequest(signal=signal)
        return await self._call("POST", f"/processes/{proc_id}/signal", ProcessInfo, body)

    async def wait_process(self, proc_id: str, timeout_s: float = 60.0) -> ProcessInfo:
        body = ProcessWaitRequest(timeout_s=timeout_s)
        return await self._call("POST", f"/processes/{proc_id}/wait", ProcessInfo, body)

    async def remove_process(self, proc_id: str) -> ProcessInfo:
        return await self._call("DELETE", f"/processes/{proc_id}", ProcessInfo)

    # -- files -----------------------------------------------------------------------------

    async def read_file(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        params = {"path": path, "offset": offset, "length": length}
        async with self._session.get(
            self._api + "/files", params=_params(params), headers=self._headers
        ) as response:
            raw = await response.read()
            self._raise_for(response, raw)
            return raw

    async def write_file(
        self,
        path: str,
        data: bytes | AsyncIterator[bytes],
        mode: int | None = None,
        parents: bool = True,
    ) -> FileStat:
        params = {
            "path": path,
            "mode": f"{mode:o}" if mode is not None else None,
            "parents": parents,
        }
        return await self._call("PUT", "/files", FileStat, params=params, data=data)

    async def stat(self, path: str) -> FileStat:
        return await self._call("GET", "/files/stat", FileStat, params={"path": path})

    async def list_dir(self, path: str) -> DirListing:
        return await self._call("GET", "/files/list", DirListing, params={"path": path})

    async def remove(self, path: str, recursive: bool = False) -> None:
        params = {"path": path, "recursive": recursive}
        await self._call("DELETE", "/files", None, params=params)

    async def move(self, source: str, destination: str, overwrite: bool = False) -> FileStat:
        body = MoveRequest(source=source, destination=destination, overwrite=overwrite)
        return await self._call("POST", "/files/move", FileStat, body)

    async def download_dir(self, path: str) -> bytes:
        async with self._session.get(
            self._api + "/files/archive", params={"path": path}, headers=self._headers
        ) as response:
            raw = await response.read()
            self._raise_for(response, raw)
            return raw

    async def upload_dir(self, path: str, tar_bytes: bytes | AsyncIterator[bytes]) -> DirListing:
        return await self._call(
            "PUT", "/files/archive", DirListing, params={"path": path}, data=tar_bytes
        )


def _exec_request(fields: dict[str, Any]) -> ExecRequest:
    stdin = fields.get("stdin")
    if isinstance(stdin, bytes | str):
        fields["stdin"] = _blob(stdin)
    return ExecRequest(**fields)


def _blob(value: bytes | str) -> Blob:
    if isinstance(value, str):
        return Blob(data=value)
    return Blob(data=base64.b64encode(value).decode(), encoding="base64")


def _params(params: Mapping[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        out[key] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return out


def parse_error(raw: bytes) -> tuple[str, str]:
    """An error answer's reason and message (the wire model ``ErrorBody``); a body that is
    not one (a proxy's page) is ``http_error`` with its first bytes as the message."""
    error = decode_error(raw)
    if error is None:
        return ClientReason.HTTP_ERROR, raw[:200].decode(errors="replace")
    return error.reason, error.message
