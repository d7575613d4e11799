"""What a watch stream is, independent of the transport that carries it.

Why a module of its own: both clients of this layer read watch streams — :class:`KubeClient`
(aiohttp, for the controller and the facade) and :class:`kube.light.LightClient` (plain
asyncio, for the node agent, which must stay under 50 MiB RSS and so cannot import kr8s or
aiohttp). One definition of an event, of the line splitting and of the stream's ERROR
mapping keeps their behaviour equal. :class:`ApiClient` is what an informer needs of a
client (a paginated list and a watch), so informers run over either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import msgspec

from kube.errors import Gone, KubeError, error_from_status
from kube.resources import Resource

__all__ = ["ApiClient", "LineSplitter", "WatchEvent", "stream_error"]


class WatchEvent(msgspec.Struct, frozen=True):
    """One line of a watch stream: ADDED / MODIFIED / DELETED / BOOKMARK / ERROR."""

    type: str
    object: dict[str, Any]


def stream_error(status: Mapping[str, Any]) -> KubeError:
    """The error an ERROR event carries (its object is a ``Status``); 410 is :class:`Gone`."""
    code = int(status.get("code") or 500)
    err = error_from_status(code, status, what="watch")
    if code == 410 and not isinstance(err, Gone):
        return Gone(err.message, reason=err.reason, body=status)
    return err


class LineSplitter:
    """Bytes of a watch body in, decoded events out (one JSON object per line); an ERROR
    event raises its error."""

    __slots__ = ("_buf", "_decode")

    def __init__(self) -> None:
        self._buf = b""
        self._decode = msgspec.json.Decoder(WatchEvent).decode

    def feed(self, chunk: bytes) -> list[WatchEvent]:
        self._buf += chunk
        if b"\n" not in chunk:
            return []
        *lines, self._buf = self._buf.split(b"\n")
        out = []
        for line in lines:
            if not line.strip():
                continue
            ev = self._decode(line)
            if ev.type == "ERROR":
                raise stream_error(ev.object)
            out.append(ev)
        return out


class ApiClient(Protocol):
    """What an informer needs of a client: list pages and watch streams."""

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> Any: ...

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        bookmarks: bool = True,
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchEvent]]: ...
