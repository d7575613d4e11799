"""An in-process API client: requests go through the same dispatcher (and so the same
flow control, metrics and semantics) as HTTP requests, minus the socket.

Simulated kubelets use it so 400 nodes' watches and status updates don't cost 400 HTTP
connections on a 2-core machine; every object still crosses a JSON encode/decode, so no
kubelet can share mutable state with the store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec

from simcluster.apiserver.auth import User
from simcluster.apiserver.dispatch import (
    ApiRequest,
    ApiResponse,
    Dispatcher,
    RequestInfo,
    WatchStream,
)
from simcluster.errors import ApiError

__all__ = ["LocalApiError", "LocalClient"]

Obj = dict[str, Any]


class LocalApiError(ApiError):
    """A failed in-process request, carrying the server's Status."""

    def __init__(self, status: Obj) -> None:
        super().__init__(str(status.get("message", "")))
        self.status = status
        self.code = int(status.get("code", 500))
        self.reason = str(status.get("reason", ""))


class LocalClient:
    def __init__(self, dispatcher: Dispatcher, user: User) -> None:
        self.dispatcher = dispatcher
        self.user = user

    def _info(
        self,
        verb: str,
        resource: str,
        namespace: str | None,
        name: str,
        sub: str,
        group: str,
        version: str,
    ) -> RequestInfo:
        return RequestInfo(verb, group, version, resource, sub, namespace, name)

    async def request(
        self,
        verb: str,
        resource: str,
        *,
        namespace: str | None = None,
        name: str = "",
        subresource: str = "",
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        group: str = "",
        version: str = "v1",
    ) -> Obj:
        info = self._info(verb, resource, namespace, name, subresource, group, version)
        raw = msgspec.json.encode(body) if body is not None else b""
        req = ApiRequest(info, self.user, dict(query or {}), raw, content_type)
        result = await self.dispatcher.handle_async(req)
        assert isinstance(result, ApiResponse)
        obj: Obj = msgspec.json.decode(result.body)
        if result.code >= 400:
            raise LocalApiError(obj)
        return obj

    async def watch(
        self,
        resource: str,
        *,
        namespace: str | None = None,
        query: Mapping[str, str] | None = None,
        group: str = "",
        version: str = "v1",
    ) -> AsyncIterator[Obj]:
        """Yield watch events (dicts with type/object) until the server ends the stream."""
        info = RequestInfo("watch", group, version, resource, "", namespace, "")
        req = ApiRequest(info, self.user, dict(query or {}))
        stream = await self.dispatcher.handle_async(req)
        assert isinstance(stream, WatchStream)
        try:
            if stream.initial_error is not None:
                yield msgspec.json.decode(stream.initial_error)
                return
            q = stream.watcher.queue
            while True:
                item = await q.get()
                if item is None:
                    return
                for line in item.splitlines():
                    yield msgspec.json.decode(line)
        finally:
            self.dispatcher.core.store.unsubscribe(stream.watcher)
            stream.watcher.close()
