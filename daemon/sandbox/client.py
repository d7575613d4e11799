"""An async client for one sandbox daemon, speaking its wire models.

Used by the demo, the benchmarks and the tests, and a reference for anyone calling a daemon
directly. Trainers normally go through the facade and the SDK; this client is the layer below.
It is never imported by the daemon itself (the bundle stays free of aiohttp).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import aiohttp
import msgspec

from .models import (
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

__all__ = ["ClientTimeouts", "DaemonAPIError", "SandboxClient"]

T = TypeVar("T")
LARGE_BODY = 1 << 20


class DaemonAPIError(Exception):
    """The daemon answered with an error: HTTP status plus its machine-readable reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


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
    ) -> None:
        self.base_url = base_url.rstrip("/")
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
            self.base_url + path,
            data=payload,
            params=_params(params),
            headers=self._headers,
        ) as response:
            raw = await response.read()
            _raise_for(response.status, raw)
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
        return await self._call("GET", "/v1/info", DaemonInfo)

    # -- exec ------------------------------------------------------------------------------

    async def exec(self, request: ExecRequest | None = None, **fields: Any) -> ExecResult:
        """``exec(argv=[...])`` or ``exec(command="...")``; fields as in ``ExecRequest``."""
        request = request or _exec_request(fields)
        return await self._call("POST", "/v1/exec", ExecResult, request)

    async def exec_stream(
        self, request: ExecRequest | None = None, **fields: Any
    ) -> AsyncIterator[ExecEvent]:
        request = request or _exec_request(fields)
        async with self._session.post(
            self.base_url + "/v1/exec/stream",
            data=msgspec.json.encode(request),
            headers=self._headers,
        ) as response:
            if response.status != 200:
                _raise_for(response.status, await response.read())
            async for line in response.content:
                if line.strip():
                    yield msgspec.json.decode(line, type=ExecEvent)

    async def signal_exec(self, exec_id: str, signal: str = "SIGINT") -> None:
        await self._call("POST", f"/v1/exec/{exec_id}/signal", None, SignalRequest(signal=signal))

    # -- sessions --------------------------------------------------------------------------

    async def create_session(self, name: str, **fields: Any) -> SessionInfo:
        body = SessionCreateRequest(name=name, **fields)
        return await self._call("POST", "/v1/sessions", SessionInfo, body)

    async def run_in_session(self, name: str, command: str, **fields: Any) -> SessionRunResult:
        body = SessionRunRequest(command=command, **fields)
        return await self._call("POST", f"/v1/sessions/{name}/run", SessionRunResult, body)

    async def list_sessions(self) -> SessionList:
        return await self._call("GET", "/v1/sessions", SessionList)

    async def close_session(self, name: str) -> None:
        await self._call("DELETE", f"/v1/sessions/{name}", None)

    # -- background processes --------------------------------------------------------------

    async def start_process(self, **fields: Any) -> ProcessInfo:
        return await self._call("POST", "/v1/processes", ProcessInfo, ProcessStartRequest(**fields))

    async def list_processes(self) -> ProcessList:
        return await self._call("GET", "/v1/processes", ProcessList)

    async def process(self, proc_id: str) -> ProcessInfo:
        return await self._call("GET", f"/v1/processes/{proc_id}", ProcessInfo)

    async def process_output(self, proc_id: str, tail_bytes: int | None = None) -> ProcessOutput:
        params = {"tail_bytes": tail_bytes}
        return await self._call(
            "GET", f"/v1/processes/{proc_id}/output", ProcessOutput, params=params
        )

    async def signal_process(self, proc_id: str, signal: str = "SIGTERM") -> ProcessInfo:
        body = SignalRequest(signal=signal)
        return await self._call("POST", f"/v1/processes/{proc_id}/signal", ProcessInfo, body)

    async def wait_process(self, proc_id: str, timeout_s: float = 60.0) -> ProcessInfo:
        body = ProcessWaitRequest(timeout_s=timeout_s)
        return await self._call("POST", f"/v1/processes/{proc_id}/wait", ProcessInfo, body)

    async def remove_process(self, proc_id: str) -> ProcessInfo:
        return await self._call("DELETE", f"/v1/processes/{proc_id}", ProcessInfo)

    # -- files -----------------------------------------------------------------------------

    async def read_file(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        params = {"path": path, "offset": offset, "length": length}
        async with self._session.get(
            self.base_url + "/v1/files", params=_params(params), headers=self._headers
        ) as response:
            raw = await response.read()
            _raise_for(response.status, raw)
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
        return await self._call("PUT", "/v1/files", FileStat, params=params, data=data)

    async def stat(self, path: str) -> FileStat:
        return await self._call("GET", "/v1/files/stat", FileStat, params={"path": path})

    async def list_dir(self, path: str) -> DirListing:
        return await self._call("GET", "/v1/files/list", DirListing, params={"path": path})

    async def remove(self, path: str, recursive: bool = False) -> None:
        params = {"path": path, "recursive": recursive}
        await self._call("DELETE", "/v1/files", None, params=params)

    async def move(self, source: str, destination: str, overwrite: bool = False) -> FileStat:
        body = MoveRequest(source=source, destination=destination, overwrite=overwrite)
        return await self._call("POST", "/v1/files/move", FileStat, body)

    async def download_dir(self, path: str) -> bytes:
        async with self._session.get(
            self.base_url + "/v1/files/archive", params={"path": path}, headers=self._headers
        ) as response:
            raw = await response.read()
            _raise_for(response.status, raw)
            return raw

    async def upload_dir(self, path: str, tar_bytes: bytes | AsyncIterator[bytes]) -> DirListing:
        return await self._call(
            "PUT", "/v1/files/archive", DirListing, params={"path": path}, data=tar_bytes
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


def _raise_for(status: int, raw: bytes) -> None:
    if status < 400:
        return
    try:
        error = json.loads(raw)["error"]
        raise DaemonAPIError(status, error["reason"], error["message"])
    except (ValueError, KeyError, TypeError):
        raise DaemonAPIError(status, "http_error", raw[:200].decode(errors="replace")) from None
