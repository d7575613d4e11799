"""HTTP handlers of the facade: decode and validate, authenticate, call the service, encode.

Every failure leaves as ``{"error": {"reason", "message"}}`` with a fitting status: a bad
body is a 400 naming the field (msgspec validates while decoding), an oversized one a 413,
an unknown route a 404, and an unexpected exception a 500 ``internal`` that is logged with
its traceback — never a hung connection or an HTML error page.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sandman.wire.facade import ClassInfo, ClassList, CreateBatch, CreateSandbox, LeaseRenewal
from sandman.wire.prepare import PrepareImages

from .errors import FacadeError, error_response
from .index import SandboxIndex
from .metrics import FacadeMetrics
from .prepare import PreparationService
from .proxy import DaemonProxy
from .routes import PROXIED, ROUTES, render
from .service import SandboxService
from .tenancy import Tenant, TenantDirectory

__all__ = ["FacadeHandlers"]

log = logging.getLogger("facade")
T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
TENANT = "sandman.tenant"
_PUBLIC = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})
_PROXY_PATH = "/v1/sandboxes/{id}/{tail:(?:" + "|".join(PROXIED) + ")(?:/.*)?}"


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(obj), status=status, content_type="application/json"
    )


async def _decode(request: web.Request, model: type[T]) -> T:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as e:
        limit = request.app._client_max_size
        raise FacadeError(413, "body_too_large", f"request body over {limit} bytes") from e
    try:
        return msgspec.json.decode(raw or b"{}", type=model)
    except msgspec.ValidationError as e:
        raise FacadeError(400, "invalid_request", str(e)) from e
    except msgspec.DecodeError as e:
        raise FacadeError(400, "invalid_json", f"the body is not valid JSON: {e}") from e


def _tenant(request: web.Request) -> Tenant:
    tenant: Tenant = request[TENANT]
    return tenant


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
        table = [web.route(r.method, r.path, getattr(self, r.handler)) for r in ROUTES]
        return [
            *table,
            web.route("*", _PROXY_PATH, self.forward),
            web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz),
            web.get("/metrics", self.prometheus),
            web.get("/openapi.json", self.openapi),
        ]

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
            if request.path not in _PUBLIC:
                request[TENANT] = self._authenticate(request)
            return await handler(request)
        except FacadeError as e:
            return error_response(e)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            reason = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
            return error_response(
                FacadeError(e.status, reason.get(e.status, "bad_request"), e.reason)
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
    async def create(self, request: web.Request) -> web.Response:
        spec = await _decode(request, CreateSandbox)
        key = request.headers.get("Idempotency-Key")
        sandbox, created = await self.service.create(_tenant(request), spec, key)
        return _json(sandbox, 201 if created else 200)

    async def create_batch(self, request: web.Request) -> web.Response:
        batch = await _decode(request, CreateBatch)
        key = request.headers.get("Idempotency-Key")
        return _json(await self.service.create_batch(_tenant(request), batch, key), 201)

    async def get(self, request: web.Request) -> web.Response:
        tenant, sid = _tenant(request), request.match_info["id"]
        until = request.query.get("wait")
        if not until:
            return _json(self.service.get(tenant, sid))
        timeout_s = _number(request, "timeout_s", 30.0)
        self.metrics.waiters.inc()
        try:
            return _json(await self.service.wait(tenant, sid, until, timeout_s))
        finally:
            self.metrics.waiters.dec()

    async def list(self, request: web.Request) -> web.Response:
        labels: dict[str, str] = {}
        for item in request.query.getall("label", []):
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise FacadeError(400, "invalid_label", f"label filter {item!r} is not k=v")
            labels[key] = value
        page = self.service.list(
            _tenant(request),
            owner=request.query.get("owner"),
            labels=labels,
            state=request.query.get("state"),
            limit=int(_number(request, "limit", 100)),
            after=request.query.get("continue"),
        )
        return _json(page)

    async def release(self, request: web.Request) -> web.Response:
        return _json(await self.service.release(_tenant(request), request.match_info["id"]), 202)

    async def release_owner(self, request: web.Request) -> web.Response:
        owner = request.query.get("owner")
        if not owner:
            raise FacadeError(400, "owner_required", "DELETE /v1/sandboxes needs ?owner=")
        return _json(await self.service.release_owner(_tenant(request), owner), 202)

    async def renew_lease(self, request: web.Request) -> web.Response:
        body = await _decode(request, LeaseRenewal)
        owner = request.match_info["owner"]
        return _json(await self.service.renew_lease(_tenant(request), owner, body.duration_s))

    async def classes(self, request: web.Request) -> web.Response:
        items = [
            ClassInfo(name=c.name, cpu=c.cpu, memory=c.memory, runtime_class=c.runtime_class)
            for c in self.service.classes.values()
        ]
        return _json(ClassList(items=items))

    # --- preparation ----------------------------------------------------------------------
    async def prepare(self, request: web.Request) -> web.Response:
        body = await _decode(request, PrepareImages)
        key = request.headers.get("Idempotency-Key")
        view, created = await self.preparations.create(_tenant(request), body, key)
        return _json(view, 201 if created else 200)

    async def get_preparation(self, request: web.Request) -> web.Response:
        return _json(await self.preparations.get(_tenant(request), request.match_info["id"]))

    # --- tool calls -----------------------------------------------------------------------
    async def forward(self, request: web.Request) -> web.StreamResponse:
        tenant, sid = _tenant(request), request.match_info["id"]
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
        path = "/v1/" + request.match_info["tail"]
        try:
            return await self.proxy.forward(request, ip, token, path)
        except FacadeError as e:
            self.metrics.proxy_errors.labels(e.reason).inc()
            raise

    # --- operations -----------------------------------------------------------------------
    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(self, request: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="watch caches not synced\n")

    async def prometheus(self, request: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def openapi(self, request: web.Request) -> web.Response:
        return web.Response(text=render(), content_type="application/json")


def _number(request: web.Request, name: str, default: float) -> float:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError as e:
        raise FacadeError(400, f"invalid_{name}", f"{name} must be a number") from e
