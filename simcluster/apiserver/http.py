"""The HTTP front end: aiohttp on loopback, JSON via msgspec, chunked watch streams.

Only transport concerns live here (authentication header, content types, streaming, timeouts,
bookmarks); every API decision is made by the dispatcher and the core, which in-process
clients share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from simcluster.apiserver import discovery
from simcluster.apiserver.auth import Authenticator, User, write_kubeconfig
from simcluster.apiserver.core import ApiCore
from simcluster.apiserver.dispatch import (
    ApiRequest,
    ApiResponse,
    Dispatcher,
    WatchStream,
    parse_path,
    response_json,
)
from simcluster.apiserver.faults import ApiFaults
from simcluster.apiserver.flowcontrol import default_flow_control
from simcluster.apiserver.impersonation import impersonate
from simcluster.apiserver.kinds.apiservices import local_api_services
from simcluster.apiserver.metrics import ApiMetrics
from simcluster.apiserver.rbac import Attributes, Authorizer
from simcluster.apiserver.rbac_bootstrap import bootstrap_objects
from simcluster.apiserver.remotecommand import serve_pod_stream
from simcluster.apiserver.resources import Registry
from simcluster.apiserver.store import Store
from simcluster.apiserver.streams import PodStream, PodStreams
from simcluster.apiserver.tls import ServingCerts
from simcluster.errors import (
    ApiError,
    BadRequest,
    Forbidden,
    InternalError,
    NotFound,
    RequestEntityTooLarge,
    Unauthorized,
)

__all__ = ["ApiServer", "ServerSettings"]

log = logging.getLogger(__name__)
_PUBLIC = frozenset({"/version", "/healthz", "/livez", "/readyz"})


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 0
    history: int = 10_000  # watch events kept for resume at most; older ones get 410
    watch_window_s: float = 75.0  # and for this long at most (upstream's eventFreshDuration)
    bookmark_interval_s: float = 60.0
    watch_timeout_s: float = 1800.0  # when the client sends no timeoutSeconds
    tls: bool = True  # kubectl only sends bearer tokens over TLS
    write_latency_s: float = 0.0  # added to every mutating request (etcd + admission)
    flowcontrol: Mapping[str, Any] = field(default_factory=dict)  # see flowcontrol.py
    fault_seed: int = 0
    max_body_bytes: int = 3 * 1024 * 1024  # upstream's MaxRequestBodyBytes: larger is 413
    #: "always-allow" (every authenticated user may do everything) or "rbac" (rbac.py)
    authorization: str = "always-allow"
    #: RuntimeClasses whose pods Pod Security admission does not check (upstream's
    #: ``exemptions.runtimeClasses`` of the PodSecurity admission configuration)
    pod_security_exempt_runtime_classes: tuple[str, ...] = ()


def _json_response(code: int, obj: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=response_json(obj), status=code, content_type="application/json", headers=headers
    )


#: upstream's cacher sends a bookmark this long before a watch's timeout, so the client
#: resumes from a fresh resourceVersion rather than one the window may have dropped
_PRE_TIMEOUT_BOOKMARK_S = 2.0


def _next_bookmark(now: float, deadline: float, interval: float) -> float | None:
    """When the next BOOKMARK is due, as upstream's ``cacheWatcher.nextBookmarkTime``: every
    ``interval``, or 2 s before the deadline if that comes first; None once that is past."""
    due = min(now + interval, deadline - _PRE_TIMEOUT_BOOKMARK_S)
    return None if due <= now else due


async def _read_body(request: web.BaseRequest, limit: int) -> bytes:
    """The request body, or 413 past ``limit`` (declared or streamed), as upstream's
    ``limitedReadBody``; aiohttp's own 1 MiB cap raised an exception that became a 500."""
    too_large = RequestEntityTooLarge(f"Request entity too large: limit is {limit}")
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    data = bytearray()
    async for chunk in request.content.iter_any():
        data += chunk
        if len(data) > limit:
            raise too_large
    return bytes(data)


def _error_response(err: ApiError) -> web.Response:
    headers = {"Retry-After": str(err.retry_after)} if err.retry_after is not None else None
    return _json_response(err.code, err.to_status(), headers)


class ApiServer:
    """Owns the store, core, dispatcher and the aiohttp site."""

    def __init__(self, settings: ServerSettings | None = None) -> None:
        self.settings = settings or ServerSettings()
        self.registry = Registry.builtin()
        self.store = Store(self.settings.history, self.settings.watch_window_s)
        self.auth = Authenticator()
        self.core = ApiCore(
            self.registry,
            self.store,
            auth=self.auth,
            exempt_runtime_classes=self.settings.pod_security_exempt_runtime_classes,
        )
        self.metrics = ApiMetrics()
        self.faults = ApiFaults(self.settings.fault_seed)
        self.authorizer = Authorizer(self.store, self.settings.authorization)
        self.dispatcher = Dispatcher(
            self.core,
            default_flow_control(self.settings.flowcontrol),
            self.metrics,
            self.faults,
            self.settings.write_latency_s,
            self.authorizer,
        )
        # admin fault kinds handled outside the API layer (nodes, kubelets): kind -> handler
        self.admin_handlers: dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]] = {}
        #: the nodes' side of pods/log?follow, pods/exec, pods/attach (set by the cluster)
        self.pod_streams: PodStreams | None = None
        self._runner: web.ServerRunner | None = None
        self._streams: set[asyncio.Task[Any]] = set()
        self.url = ""
        self.address = ""
        self.certs = ServingCerts.generate() if self.settings.tls else None
        # upstream's schemas, loaded on the first /openapi/v3/<gv>, and the stored CRDs'
        self.openapi = discovery.openapi_schemas(
            lambda: self.store.iter("apiextensions.k8s.io/customresourcedefinitions")
        )
        self._bootstrap()

    def _bootstrap(self) -> None:
        ns = self.registry.get("", "v1", "namespaces")
        assert ns is not None
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.core.create(ns, "", {"metadata": {"name": name}})
        apiservices = self.registry.get("apiregistration.k8s.io", "v1", "apiservices")
        assert apiservices is not None
        for obj in local_api_services(self.registry):
            self.core.create(apiservices, "", obj)
        if self.authorizer.enforcing:
            for plural, obj in bootstrap_objects():
                rt = self.registry.get("rbac.authorization.k8s.io", "v1", plural)
                assert rt is not None
                self.core.create(rt, "", obj)

    # --- lifecycle ---------------------------------------------------------------------
    async def start(self) -> str:
        # the low-level server: one handler, no router or middleware (~0.1 ms saved per request)
        # handler_cancellation: a watch whose client hung up ends now, not at its timeout
        server = web.Server(self._handle, access_log=None, handler_cancellation=True)
        self._runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        ssl_ctx = self.certs.server_context() if self.certs else None
        site = web.TCPSite(
            self._runner, self.settings.host, self.settings.port, backlog=1024, ssl_context=ssl_ctx
        )
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.address = f"{host}:{port}"
        self.url = f"{'https' if self.certs else 'http'}://{self.address}"
        return self.url

    def kubeconfig(self, path: Path, user: User, *, namespace: str = "default") -> Path:
        """Mint a token for ``user`` and write a kubeconfig for it."""
        token = self.auth.issue(user)
        ca = self.certs.ca_pem if self.certs else None
        return write_kubeconfig(
            path, self.url, token, user=user.name, namespace=namespace, ca_pem=ca
        )

    async def stop(self) -> None:
        for w in self.store.all_watchers():
            w.close()
        if self._runner is not None:
            # TLS close waits for the peer's close_notify (up to 30 s): idle pooled client
            # connections never send it, so abort what graceful cleanup leaves open.
            server = self._runner.server
            handlers = server.connections if server else []
            transports = [h.transport for h in handlers if h.transport is not None]
            await self._runner.cleanup()
            for transport in transports:
                transport.abort()
            self._runner = None

    # --- request handling --------------------------------------------------------------
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        try:
            user = self._authenticate(request, path)
            info = parse_path(request.method, path, request.query)
            if info is None:
                self._authorize_path(user, request.method, request.path)
            if path == "/metrics":
                return web.Response(body=self.metrics.render(), content_type="text/plain")
            if path == "/admin/faults" and request.method == "POST":
                return _json_response(200, await self._admin(user, await request.json()))
            static = self._static(path)
            if static is not None:
                return _json_response(200, static)
            if info is None:
                raise NotFound("the server could not find the requested resource")
            body = await _read_body(request, self.settings.max_body_bytes)
            req = ApiRequest(
                info,
                user,
                request.query,
                body,
                request.headers.get("Content-Type", "application/json"),
                request.headers.get("Accept", "application/json"),
            )
            result = await self.dispatcher.handle_async(req)
            if isinstance(result, WatchStream):
                return await self._stream(request, result)
            if isinstance(result, PodStream):
                return await serve_pod_stream(request, result, self.pod_streams)
            return self._respond(result)
        except ApiError as e:
            return _error_response(e)
        except Exception as e:
            log.exception("internal error on %s %s", request.method, path)
            return _error_response(InternalError.occurred(repr(e)))

    async def _admin(self, user: User, body: dict[str, Any]) -> dict[str, Any]:
        """Fault injection; only system:masters may use it."""
        if "system:masters" not in user.groups:
            raise Forbidden(f'User "{user.name}" cannot inject faults')
        kind = body.get("kind")
        if kind == "api-errors":
            code = body["code"]
            self.faults.set_error_rate(
                str(body.get("verb", "*")),
                float(body["rate"]),
                tuple(int(c) for c in code) if isinstance(code, list) else int(code),
                str(body.get("user", "*")),
            )
        elif kind == "latency":
            self.faults.spike(float(body["seconds"]), float(body.get("duration_s", 60)))
        elif kind == "drop-watches":
            for w in self.store.all_watchers():
                w.close()
        elif kind == "expire-watches":
            self.store.force_expired = True
            for w in self.store.all_watchers():
                w.close()
        elif kind == "clear":
            self.faults.clear()
        elif isinstance(kind, str) and kind in self.admin_handlers:
            return await self.admin_handlers[kind](body)
        else:
            kinds = [
                "api-errors",
                "latency",
                "drop-watches",
                "expire-watches",
                "clear",
                *self.admin_handlers,
            ]
            raise BadRequest(f"unknown fault kind {kind!r}; known: {', '.join(kinds)}")
        return {"kind": kind, "applied": True}

    def _respond(self, r: ApiResponse) -> web.Response:
        return web.Response(
            body=r.body, status=r.code, content_type=r.content_type, headers=r.headers or None
        )

    def _authorize_path(self, user: User, method: str, path: str) -> None:
        """A non-resource request (discovery, /version, /metrics, /admin/faults) needs a
        ``nonResourceURLs`` rule for its lower-case HTTP method, as upstream."""
        attrs = Attributes(user, method.lower(), False, path=path)
        self.authorizer.check(attrs)

    def _authenticate(self, request: web.BaseRequest, path: str) -> User:
        user = self.auth.authenticate(request.headers.get("Authorization"))
        if user is not None:
            if "Impersonate-User" in request.headers or "Impersonate-Group" in request.headers:
                groups = request.headers.getall("Impersonate-Group", [])
                return impersonate(self.authorizer, user, request.headers, groups)
            return user
        if path in _PUBLIC:
            return User("system:anonymous", ("system:unauthenticated",))
        raise Unauthorized("Unauthorized")

    def _static(self, path: str) -> Any:
        reg = self.registry
        if path == "/version":
            return discovery.version_info()
        if path in ("/healthz", "/livez", "/readyz"):
            return "ok"
        if path == "/api":
            return discovery.api_versions(self.address)
        if path == "/apis":
            return discovery.api_groups(reg)
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) == 2 and parts[1] in reg.versions(""):
            return discovery.api_resources(reg, "", parts[1])
        if parts[0] == "apis" and len(parts) == 2 and reg.versions(parts[1]):
            return discovery.api_group(reg, parts[1])
        if parts[0] == "apis" and len(parts) == 3 and parts[2] in reg.versions(parts[1]):
            return discovery.api_resources(reg, parts[1], parts[2])
        if path == "/openapi/v3":
            return discovery.openapi_root(reg, self.openapi)
        if parts[:2] == ["openapi", "v3"]:
            rest = parts[2:]
            group, version = (
                ("", rest[1])
                if rest[:1] == ["api"] and len(rest) == 2
                else (
                    (rest[1], rest[2]) if rest[:1] == ["apis"] and len(rest) == 3 else (None, None)
                )
            )
            if group is not None and version is not None:
                return discovery.openapi_gv(reg, group, version, self.openapi)
        return None

    async def _stream(self, request: web.BaseRequest, ws: WatchStream) -> web.StreamResponse:
        resp = web.StreamResponse(status=200)
        resp.content_type = "application/json"
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if ws.initial_error is not None:
            await resp.write(ws.initial_error)
            return resp
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            await self._pump(resp, ws)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._streams.discard(task)
            self.store.unsubscribe(ws.watcher)
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
        return resp

    async def _pump(self, resp: web.StreamResponse, ws: WatchStream) -> None:
        loop = asyncio.get_running_loop()
        timeout = ws.timeout if ws.timeout is not None else self.settings.watch_timeout_s
        interval = self.settings.bookmark_interval_s
        deadline = loop.time() + timeout
        next_bookmark = _next_bookmark(loop.time(), deadline, interval)
        q = ws.watcher.queue
        while True:
            now = loop.time()
            if now >= deadline:
                return
            due = next_bookmark if ws.bookmarks and next_bookmark is not None else deadline
            wait = min(deadline, due) - now
            try:
                if not q.empty():  # a busy stream skips the timeout's timer
                    item = q.get_nowait()
                else:
                    async with asyncio.timeout(wait):
                        item = await q.get()
            except TimeoutError:
                if ws.bookmarks and next_bookmark is not None and loop.time() >= next_bookmark:
                    await resp.write(self.core.bookmark(ws.rt, ws.watcher))
                    next_bookmark = _next_bookmark(loop.time(), deadline, interval)
                continue
            chunks = []
            while item is not None:
                chunks.append(item)
                if q.empty():
                    break
                item = q.get_nowait()
            if chunks:
                data = b"".join(chunks)
                self.metrics.watch_events.labels(ws.rt.plural).inc(data.count(b"\n"))
                await resp.write(data)
            if item is None:
                return
