"""HTTP handlers of the facade: decode and validate, authenticate, call the service, encode.

Every failure leaves as ``{"error": {"reason", "message"}}`` with a fitting status: a bad
body, query or path parameter is a 400 naming it (decoded with the route table's wire models,
facade/params.py), an oversized body a 413, an unknown route a 404, a method the route does
not have a 405 with ``Allow``, and an unexpected exception a 500 ``internal`` that is logged
with its traceback — never a hung connection or an HTML error page.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sandman.wire.facade import (
    ClassInfo,
    ClassList,
    CreateBatch,
    CreateSandbox,
    GetQuery,
    LeaseRenewal,
    ListQuery,
    OwnerQuery,
)
from sandman.wire.prepare import PrepareImages

from .errors import FacadeError, error_response
from .index import SandboxIndex
from .metrics import FacadeMetrics
from .params import decode_body, decode_headers, decode_path, decode_query
from .paths import proxied_call
from .prepare import PreparationService
from .proxy import DaemonProxy
from .routes import IDEMPOTENCY_KEY, ROUTES, FacadeRoute, render
from .service import SandboxService
from .tenancy import Tenant, TenantDirectory

__all__ = ["FacadeHandlers"]

log = logging.getLogger("facade")
T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_PUBLIC = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})
#: Every tail: facade/paths.py decides what is a daemon operation (400/404/405 otherwise).
_PROXY_PATH = "/v1/sandboxes/{id}/{tail:.+}"


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(obj), status=status, content_type="application/json"
    )


@dataclass(frozen=True, slots=True)
class Call:
    """A request to one of the facade's own operations, authenticated and decoded by its
    route's row before the handler runs (handlers take ``(request, call)``)."""

    tenant: Tenant
    query: Any = None  # the route's query model, or None
    path: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, Any] = field(default_factory=dict)


CallHandler = Callable[[web.Request, Call], Awaitable[web.StreamResponse]]


class FacadeHandlers:
    def __init__(
        self,
        service: SandboxService,
        index: SandboxIndex,
        tenants: TenantDirectory,
        proxy: DaemonProxy,
        metrics: FacadeMetrics,
        ready: Callable[[], bool],
        preparations: PreparationService,
    ) -> None:
        self.service = service
        self.index = index
        self.tenants = tenants
        self.proxy = proxy
        self.metrics = metrics
        self.ready = ready
        self.preparations = preparations

    def routes(self) -> list[web.AbstractRouteDef]:
        table = [web.route(r.method, r.path, self._decoding(r)) for r in ROUTES]
        return [
            *table,
            web.route("*", _PROXY_PATH, self.forward),
            web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz),
            web.get("/metrics", self.prometheus),
            web.get("/openapi.json", self.openapi),
        ]

    def _decoding(self, route: FacadeRoute) -> Handler:
        """The route's handler, called once the caller is authenticated (401) and the
        parameters are decoded (400s), both before it runs."""
        handler: CallHandler = getattr(self, route.handler)

        async def decoded(request: web.Request) -> web.StreamResponse:
            tenant = self._authenticate(request)
            if route.query_model is None and request.query:
                raise FacadeError(400, "unknown_parameter", f"{route.path} takes no query")
            call = Call(
                tenant=tenant,
                query=decode_query(request, route.query_model) if route.query_model else None,
                path=decode_path(request, route.path_types),
                headers=decode_headers(request, route.header_types),
            )
            return await handler(request, call)

        return decoded

    # --- middlewares ----------------------------------------------------------------------
    @web.middleware
    async def observe(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        try:
            response = await self._guarded(request, handler)
        finally:
            self.metrics.request_duration.labels(route).observe(time.perf_counter() - started)
        self.metrics.requests.labels(route, request.method, str(response.status)).inc()
        return response

    async def _guarded(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except FacadeError as e:
            return error_response(e)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            if request.path not in _PUBLIC:  # no route: still 401 before 404/405
                try:
                    self._authenticate(request)
                except FacadeError as unauthenticated:
                    return error_response(unauthenticated)
            reason = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
            allow = tuple(sorted(getattr(e, "allowed_methods", ())))
            return error_response(
                FacadeError(e.status, reason.get(e.status, "bad_request"), e.reason, allow=allow)
            )
        except Exception:
            log.exception("unexpected error serving %s %s", request.method, request.path)
            return error_response(FacadeError(500, "internal", "internal error (logged)"))

    def _authenticate(self, request: web.Request) -> Tenant:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        tenant = self.tenants.authenticate(token.strip()) if scheme.lower() == "bearer" else None
        if tenant is None:
            raise FacadeError(401, "unauthenticated", "missing or unknown bearer token")
        return tenant

    # --- sandboxes ------------------------------------------------------------------------
    async def create(self, request: web.Request, call: Call) -> web.Response:
        spec = await decode_body(request, CreateSandbox)
        key = call.headers.get(IDEMPOTENCY_KEY)
        sandbox, created = await self.service.create(call.tenant, spec, key)
        return _json(sandbox, 201 if created else 200)

    async def create_batch(self, request: web.Request, call: Call) -> web.Response:
        batch = await decode_body(request, CreateBatch)
        key = call.headers.get(IDEMPOTENCY_KEY)
        return _json(await self.service.create_batch(call.tenant, batch, key), 201)

    async def get(self, request: web.Request, call: Call) -> web.Response:
        sid, query = request.match_info["id"], call.query
        assert isinstance(query, GetQuery)
        if isinstance(query.wait, msgspec.UnsetType):
            return _json(self.service.get(call.tenant, sid))
        self.metrics.waiters.inc()
        try:
            return _json(await self.service.wait(call.tenant, sid, query.wait, query.timeout_s))
        finally:
            self.metrics.waiters.dec()

    async def list(self, request: web.Request, call: Call) -> web.Response:
        query = call.query
        assert isinstance(query, ListQuery)
        labels = dict(item.split("=", 1) for item in query.label)
        page = self.service.list(
            call.tenant,
            owner=_given(query.owner),
            labels=labels,
            state=_given(query.state),
            limit=query.limit,
            after=_given(query.after),
        )
        return _json(page)

    async def release(self, request: web.Request, call: Call) -> web.Response:
        return _json(await self.service.release(call.tenant, request.match_info["id"]), 202)

    async def release_owner(self, request: web.Request, call: Call) -> web.Response:
        assert isinstance(call.query, OwnerQuery)
        released = await self.service.release_owner(call.tenant, call.query.owner)
        released.preparations = await self.preparations.release_owner(call.tenant, call.query.owner)
        return _json(released, 202)

    async def renew_lease(self, request: web.Request, call: Call) -> web.Response:
        body = await decode_body(request, LeaseRenewal)
        owner = call.path["owner"]
        return _json(await self.service.renew_lease(call.tenant, owner, body.duration_s))

    async def classes(self, request: web.Request, call: Call) -> web.Response:
        items = [
            ClassInfo(name=c.name, cpu=c.cpu, memory=c.memory, runtime_class=c.runtime_class)
            for c in self.service.classes.values()
        ]
        return _json(ClassList(items=items))

    # --- preparation ----------------------------------------------------------------------
    async def prepare(self, request: web.Request, call: Call) -> web.Response:
        body = await decode_body(request, PrepareImages)
        key = call.headers.get(IDEMPOTENCY_KEY)
        view, created = await self.preparations.create(call.tenant, body, key)
        return _json(view, 201 if created else 200)

    async def get_preparation(self, request: web.Request, call: Call) -> web.Response:
        return _json(await self.preparations.get(call.tenant, request.match_info["id"]))

    # --- tool calls -----------------------------------------------------------------------
    async def forward(self, request: web.Request) -> web.StreamResponse:
        tenant = self._authenticate(request)
        call = proxied_call(request.method, request.rel_url.raw_path)
        sid = call.sandbox_id
        sandbox = self.service.get(tenant, sid)
        if sandbox.state in ("failed", "terminated", "releasing"):
            raise FacadeError(
                410,
                "sandbox_terminated" if sandbox.state != "failed" else "sandbox_failed",
                f"sandbox {sid} is {sandbox.state}"
                + (f" ({sandbox.reason})" if sandbox.reason else ""),
            )
        pod = self.index.current_pod(tenant.namespace, sid)
        ip = ((pod or {}).get("status") or {}).get("podIP")
        if sandbox.state != "ready" or not ip:
            raise FacadeError(
                409, "sandbox_not_ready", f"sandbox {sid} is {sandbox.state}; wait for ready"
            )
        token = self.service.minter.token_for(tenant.namespace, sid)
        try:
            return await self.proxy.forward(request, ip, token, call.path)
        except FacadeError as e:
            self.metrics.proxy_errors.labels(e.reason).inc()
            raise

    # --- operations -----------------------------------------------------------------------
    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="watch caches not synced, or refused (403)\n")

    async def prometheus(self, request: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def openapi(self, request: web.Request) -> web.Response:
        return web.Response(text=render(), content_type="application/json")


def _given(value: T | msgspec.UnsetType) -> T | None:
    return None if isinstance(value, msgspec.UnsetType) else value
