"""The pod subresources that stream: ``pods/log?follow=true``, ``pods/exec`` and ``pods/attach``.

Why a module of their own: every other request is one answer the dispatcher computes in one
go, while these hold a connection open for as long as a container writes or a command runs.
Upstream the API server checks the request (the pod exists and is bound, the container is
one of its own, the options make sense) and then proxies the connection to the kubelet of
the pod's node, whose streaming server runs the command in the container. simcluster keeps
that split: ``stream_request`` makes the API server's checks inside the dispatcher (after
authentication, flow control and authorization, so a stream is counted and refused like any
request), and returns a ``PodStream``; the HTTP front end then serves it against a
``PodStreams`` backend, which the cluster wires to its kubelets (``kubelet/streaming.py``)
as it wires the log reader — the API server never names a runtime.

Authorization is upstream's (v1.35+, ``AuthorizePodWebsocketUpgradeCreatePermission``): a
WebSocket upgrade is a GET, authorized as ``get`` on ``pods/exec``; exec and attach need
``create`` as well, which a POST is authorized as.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from simcluster.apiserver.auth import User
from simcluster.apiserver.core import ApiCore
from simcluster.apiserver.rbac import Attributes, Authorizer, request_attributes
from simcluster.apiserver.resources import ResourceType
from simcluster.errors import BadRequest

__all__ = [
    "ExecProcess",
    "PodStream",
    "PodStreams",
    "is_stream_request",
    "serve_log",
    "stream_request",
]

#: Subresources served over a WebSocket upgrade (and that need ``create`` for a GET).
UPGRADE_SUBRESOURCES = ("exec", "attach")


@dataclass(frozen=True, slots=True)
class PodStream:
    """A checked streaming request: which container of which pod, and what to do there."""

    subresource: str  # "log", "exec" or "attach"
    namespace: str
    pod: str
    uid: str
    node: str
    container: str
    command: tuple[str, ...] = ()
    stdin: bool = False
    stdout: bool = True
    stderr: bool = True
    tty: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None


class ExecProcess(Protocol):
    """A command running in a container (the backend's half of an exec session)."""

    async def write_stdin(self, data: bytes) -> None: ...

    def close_stdin(self) -> None: ...

    async def read_stdout(self) -> bytes: ...  # b"" at the end

    async def read_stderr(self) -> bytes: ...  # b"" at the end (at once with a TTY)

    def resize(self, width: int, height: int) -> None: ...

    async def wait(self) -> int: ...  # the exit code

    async def kill(self) -> None: ...


class PodStreams(Protocol):
    """What the API server asks of a pod's node (upstream: the kubelet's streaming server).
    Each method raises an ``ApiError`` when the node cannot serve the request."""

    def follow_log(self, stream: PodStream) -> AsyncGenerator[bytes, None]: ...

    def exec(self, stream: PodStream) -> Callable[[], Awaitable[ExecProcess]]:
        """Check that the command can run there (raising the refusal at once, before any
        upgrade), and return what starts it."""
        ...

    def attach(self, stream: PodStream) -> Callable[[], Awaitable[ExecProcess]]:
        """As ``exec``, for the container's own process: what it writes from now on."""
        ...


def is_stream_request(rt: ResourceType, subresource: str, query: Mapping[str, str]) -> bool:
    """Whether the dispatcher hands this request to ``stream_request``."""
    if rt.plural != "pods" or not subresource:
        return False
    if subresource == "log":
        return _flag(query, "follow")
    return subresource in UPGRADE_SUBRESOURCES


def _flag(query: Mapping[str, str], key: str, default: bool = False) -> bool:
    value = query.get(key)
    if value is None:
        return default
    return value != "0" and value.lower() != "false"


def _values(query: Mapping[str, str], key: str) -> tuple[str, ...]:
    getall = getattr(query, "getall", None)
    if getall is not None:
        return tuple(getall(key, ()))
    value = query.get(key)
    return () if value is None else (value,)


def _int(query: Mapping[str, str], key: str) -> int | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(f"invalid {key} {raw!r}: not an integer")


def stream_request(
    core: ApiCore, authorizer: Authorizer, rt: ResourceType, info: Any, user: User, query: Any
) -> PodStream:
    """The API server's checks of a streaming request (upstream's ``ExecLocation``,
    ``AttachLocation``, ``LogLocation``), in upstream's order: the create permission of an
    upgrade, the pod, its container, its node, the options."""
    sub = info.subresource
    if sub in UPGRADE_SUBRESOURCES and info.verb == "get":
        attrs = request_attributes(info, user, query)
        authorizer.check(Attributes(attrs.user, "create", *attrs[2:]))
    pod = core.get(rt, info.namespace or "", info.name)
    container = _container(pod, query.get("container") or "")
    node = pod["spec"].get("nodeName") or ""
    if not node and sub != "log":  # an unbound pod's log is empty (upstream's LogLocation)
        raise BadRequest(f"pod {info.name} does not have a host assigned")
    common: dict[str, Any] = {
        "subresource": sub,
        "namespace": info.namespace or "",
        "pod": info.name,
        "uid": pod["metadata"]["uid"],
        "node": node,
        "container": container,
    }
    if sub == "log":
        return PodStream(
            **common, tail_lines=_int(query, "tailLines"), limit_bytes=_int(query, "limitBytes")
        )
    return PodStream(**common, **_remote_options(sub, query))


def _container(pod: Mapping[str, Any], asked: str) -> str:
    names = [c["name"] for c in pod["spec"].get("containers") or []]
    name = pod["metadata"]["name"]
    if not asked:
        if len(names) == 1:
            return names[0]
        raise BadRequest(
            f"a container name must be specified for pod {name}, choose one of: {names}"
        )
    if asked not in names:
        raise BadRequest(f"container {asked} is not valid for pod {name}")
    return asked


def _remote_options(sub: str, query: Mapping[str, str]) -> dict[str, Any]:
    """``PodExecOptions``/``PodAttachOptions`` as upstream validates them."""
    command = _values(query, "command")
    if sub == "exec" and not command:
        raise BadRequest("you must specify at least 1 command")
    options = {
        "command": command,
        "stdin": _flag(query, "stdin"),
        "stdout": _flag(query, "stdout", True),
        "stderr": _flag(query, "stderr", True),
        "tty": _flag(query, "tty"),
    }
    if not (options["stdin"] or options["stdout"] or options["stderr"]):
        raise BadRequest("you must specify at least one of stdin, stdout, stderr")
    if options["tty"]:
        options["stderr"] = False  # a terminal has one output stream
    return options


async def serve_log(
    request: web.BaseRequest, stream: PodStream, backend: PodStreams
) -> web.StreamResponse:
    """``pods/log?follow=true``: the container's output as it is written, chunk by chunk,
    until the container ends (then the response ends, as the kubelet's does)."""
    source = backend.follow_log(stream)
    first = await anext(source, b"")  # errors (no such container) are still a Status
    resp = web.StreamResponse(status=200)
    resp.content_type = "text/plain"
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    left = stream.limit_bytes
    try:
        chunk = first
        while True:
            if left is not None:
                chunk, left = chunk[:left], left - len(chunk[:left])
            if chunk:
                await resp.write(chunk)
            if left == 0:
                break
            nxt = await anext(source, None)
            if nxt is None:
                break
            chunk = nxt
    except ConnectionResetError:
        pass  # the client hung up
    finally:
        await source.aclose()
    with contextlib.suppress(ConnectionResetError):
        await resp.write_eof()
    return resp
