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

from daemon.sandbox.api import bind
from sandman.wire.errors import Reason
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
from sandman.wire.image_preparation import PrepareImages

from . import routes
from .announcements import PreparationService
from .audit import COMMAND_OPERATIONS, REQUEST_ID, AuditEntry, AuditLog, AuditSettings, command_of
from .errors import FacadeError, error_response
from .fairness import (
    CALL,
    LONG_WAITS,
    REFUSALS,
    WAIT,
    InFlight,
    LoginThrottle,
    LoginThrottleSettings,
)
from .index import SandboxIndex
from .metrics import FacadeMetrics
from .params import decode_body, decode_headers, decode_path, decode_query
from .paths import PORT_HTTP, PORT_WEBSOCKET, port_call, proxied_call
from .port_proxy import is_upgrade
from .proxy import DaemonProxy
from .routes import IDEMPOTENCY_KEY, FacadeRoute, render
from .service import SandboxService
from .tenancy import Tenant, TenantDirectory

__all__ = ["FacadeHandlers"]

log = logging.getLogger("facade")
T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_PUBLIC = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})
#: The router's own refusals (aiohttp's HTTPException) as the table's reasons.
_ROUTER_REASONS = {
    404: Reason.NOT_FOUND,
    405: Reason.METHOD_NOT_ALLOWED,
    413: Reason.BODY_TOO_LARGE,
}
#: Every tail: facade/paths.py decides what is a daemon operation (400/404/405 otherwise).
_PROXY_PATH = "/v1/sandboxes/{id}/{tail:.+}"
#: Forwarded ports (facade/port_proxy.py), matched before the tool calls' tail.
_PORT_PATH = "/v1/sandboxes/{id}/ports/{tail:.*}"
#: The request's audit entry (facade/audit.py) and its authenticated tenant.
_AUDIT = web.RequestKey("sandman_audit", AuditEntry)
_TENANT = web.RequestKey("sandman_tenant", Tenant)
#: nginx's "client closed request": the trainer hung up before the answer was complete.
CLIENT_CLOSED = 499


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
        logins: LoginThrottleSettings | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self.service = service
        self.index = index
        self.tenants = tenants
        self.proxy = proxy
        self.metrics = metrics
        self.ready = ready
        self.preparations = preparations
        #: Fair sharing (facade/fairness.py): each tenant's calls and waits in flight, and
        #: failed logins per remote address.
        self.in_flight = InFlight()
        self.logins = LoginThrottle(logins or LoginThrottleSettings())
        self.audit = audit or AuditLog(AuditSettings(enabled=False))

    def operations(self) -> dict[FacadeRoute, CallHandler]:
        """Every operation of the route table (facade/routes.py) and the method serving it."""
        return {
            routes.CREATE: self.create,
            routes.CREATE_BATCH: self.create_batch,
            routes.LIST: self.list,
            routes.RELEASE_OWNER: self.release_owner,
            routes.GET: self.get,
            routes.RELEASE: self.release,
            routes.RENEW_LEASE: self.renew_lease,
            routes.PREPARE: self.prepare,
            routes.GET_PREPARATION: self.get_preparation,
            routes.CLASSES: self.classes,
        }

    def routes(self, *, metrics: bool = True) -> list[web.AbstractRouteDef]:
        """The API's routes; ``metrics``: /metrics among them (False: it has a listener of
        its own, ``--metrics-port``, and is a 404 here)."""
        bound = bind(routes.ROUTES, self.operations())
        table = [web.route(r.method, r.path, self._decoding(r, h)) for r, h in bound]
        return [
            *table,
            web.route("*", _PORT_PATH, self.forward_port),
            web.route("*", _PROXY_PATH, self.forward),
            web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz),
            *([web.get("/metrics", self.prometheus)] if metrics else []),
            web.get("/openapi.json", self.openapi),
        ]

    def _decoding(self, route: FacadeRoute, handler: CallHandler) -> Handler:
        """The route's handler, called once the caller is authenticated (401) and the
        parameters are decoded (400s), both before it runs."""

        async def decoded(request: web.Request) -> web.StreamResponse:
            request[_AUDIT].operation = route.operation
            tenant = self._authenticate(request)
            if route.query_model is None and request.query:
                raise FacadeError(f"{route.path} takes no query", reason=Reason.UNKNOWN_PARAMETER)
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
        entry = request[_AUDIT] = self.audit.begin(
            request.remote or "", request.method, request.headers.get(REQUEST_ID)
        )
        if route in _PUBLIC:
            entry.operation = route.lstrip("/").replace(".", "_")
        status = CLIENT_CLOSED
        response: web.StreamResponse | None = None
        try:
            response = await self._guarded(request, handler)
            status = response.status
            if not response.prepared:
                response.headers[REQUEST_ID] = entry.request_id
        finally:
            self.metrics.request_duration.labels(route).observe(time.perf_counter() - started)
            self._audit(request, entry, status, response)
        self.metrics.requests.labels(route, request.method, str(status)).inc()
        return response

    def _audit(
        self,
        request: web.Request,
        entry: AuditEntry,
        status: int,
        response: web.StreamResponse | None,
    ) -> None:
        """The request's audit line, its sandbox and owner looked up if a handler did not
        note them (the watch cache: one dict read)."""
        tenant = request.get(_TENANT)
        if not entry.sandboxes and (sid := request.match_info.get("id")):
            entry.sandboxes = [sid]
        if tenant is not None and entry.owner is None and len(entry.sandboxes) == 1:
            sandbox = self.index.get(tenant.namespace, entry.sandboxes[0])
            entry.owner = sandbox.owner if sandbox is not None else None
        bytes_in = request.content_length or request.content.total_bytes
        bytes_out = 0
        if response is not None:  # a Response not yet sent has its length, a stream counted
            bytes_out = response.body_length or response.content_length or 0
        self.audit.write(entry, status, bytes_in, bytes_out)

    async def _guarded(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except FacadeError as e:
            return self._refused(request, e)
        except web.HTTPException as e:
            if e.status < 400:
                raise
            if request.path not in _PUBLIC:  # no route: still 401 before 404/405
                try:
                    self._authenticate(request)
                except FacadeError as unauthenticated:
                    return self._refused(request, unauthenticated)
            allow = tuple(sorted(getattr(e, "allowed_methods", ())))
            reason = _ROUTER_REASONS.get(e.status, Reason.BAD_REQUEST)
            return self._refused(request, FacadeError(e.reason, reason=reason, allow=allow))
        except Exception:
            log.exception("unexpected error serving %s %s", request.method, request.path)
            internal = FacadeError("internal error (logged)", reason=Reason.INTERNAL)
            return self._refused(request, internal)

    def _refused(self, request: web.Request, e: FacadeError) -> web.Response:
        request[_AUDIT].reason = e.reason
        if e.reason in REFUSALS:
            tenant = request.get(_TENANT)
            name = tenant.name if tenant is not None else ""
            self.metrics.fair_share_refusals.labels(name, e.reason.value).inc()
        return error_response(e)

    def _authenticate(self, request: web.Request) -> Tenant:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        tenant = self.tenants.authenticate(token.strip()) if scheme.lower() == "bearer" else None
        if tenant is None:
            # Only a presented credential is a guess; a request without one is just a 401.
            wait = self.logins.failed(request.remote or "") if header else 0.0
            if wait > 0:
                raise FacadeError(
                    "too many unknown bearer tokens from this address",
                    reason=Reason.LOGIN_THROTTLED,
                    retry_after_s=wait,
                )
            raise FacadeError("missing or unknown bearer token", reason=Reason.UNAUTHENTICATED)
        request[_TENANT] = tenant
        request[_AUDIT].tenant = tenant.name
        return tenant

    # --- sandboxes ------------------------------------------------------------------------
    async def create(self, request: web.Request, call: Call) -> web.Response:
        spec = await decode_body(request, CreateSandbox)
        key = call.headers.get(IDEMPOTENCY_KEY)
        sandbox, created = await self.service.create(call.tenant, spec, key)
        entry = request[_AUDIT]
        entry.sandboxes, entry.owner = [sandbox.id], sandbox.owner
        return _json(sandbox, 201 if created else 200)

    async def create_batch(self, request: web.Request, call: Call) -> web.Response:
        batch = await decode_body(request, CreateBatch)
        key = call.headers.get(IDEMPOTENCY_KEY)
        result = await self.service.create_batch(call.tenant, batch, key)
        entry = request[_AUDIT]
        entry.sandboxes, entry.owner = [s.id for s in result.sandboxes], batch.spec.owner
        return _json(result, 201)

    async def get(self, request: web.Request, call: Call) -> web.Response:
        sid, query = request.match_info["id"], call.query
        assert isinstance(query, GetQuery)
        if isinstance(query.wait, msgspec.UnsetType):
            return _json(self.service.get(call.tenant, sid))
        with self.in_flight.hold(call.tenant, WAIT):
            self.metrics.waiters.inc()
            try:
                waited = await self.service.wait(call.tenant, sid, query.wait, query.timeout_s)
            finally:
                self.metrics.waiters.dec()
        return _json(waited)

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
        request[_AUDIT].owner = call.query.owner
        released = await self.service.release_owner(call.tenant, call.query.owner)
        released.preparations = await self.preparations.release_owner(call.tenant, call.query.owner)
        return _json(released, 202)

    async def renew_lease(self, request: web.Request, call: Call) -> web.Response:
        body = await decode_body(request, LeaseRenewal)
        owner = request[_AUDIT].owner = call.path["owner"]
        return _json(await self.service.renew_lease(call.tenant, owner, body.duration_s))

    async def classes(self, request: web.Request, call: Call) -> web.Response:
        allowed = call.tenant.allowed_classes
        items = [
            ClassInfo(name=c.name, cpu=c.cpu, memory=c.memory, runtime_class=c.runtime_class)
            for c in self.service.classes.values()
            if allowed is None or c.name in allowed
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
        entry = request[_AUDIT]
        entry.operation = "tool_call"  # until the path names the daemon operation
        tenant = self._authenticate(request)
        call = proxied_call(request.method, request.rel_url.raw_path)
        entry.operation = call.operation
        ip, token = self._reach(tenant, call.sandbox_id)
        waits = call.operation in LONG_WAITS or "wait" in request.query
        body = await self._command_body(request, entry)  # a refused call's command too
        with self.in_flight.hold(tenant, WAIT if waits else CALL):
            try:
                return await self.proxy.forward(request, ip, token, call.path, body=body)
            except FacadeError as e:
                self.metrics.proxy_errors.labels(e.reason).inc()
                raise

    def _reach(self, tenant: Tenant, sid: str) -> tuple[str, str]:
        """The pod IP and daemon token of a ready sandbox (else 409/410 with its state)."""
        sandbox = self.service.get(tenant, sid)
        if sandbox.state in ("failed", "terminated", "releasing"):
            raise FacadeError(
                f"sandbox {sid} is {sandbox.state}"
                + (f" ({sandbox.reason})" if sandbox.reason else ""),
                reason=Reason.SANDBOX_FAILED
                if sandbox.state == "failed"
                else Reason.SANDBOX_TERMINATED,
            )
        pod = self.index.current_pod(tenant.namespace, sid)
        ip = ((pod or {}).get("status") or {}).get("podIP")
        if pod is None or sandbox.state != "ready" or not ip:
            raise FacadeError(
                f"sandbox {sid} is {sandbox.state}; wait for ready",
                reason=Reason.SANDBOX_NOT_READY,
            )
        return ip, self.service.minter.token_of(pod)

    async def forward_port(self, request: web.Request) -> web.StreamResponse:
        """A forwarded port (facade/port_proxy.py): HTTP, or a WebSocket upgrade."""
        entry = request[_AUDIT]
        upgrade = is_upgrade(request)
        entry.operation = PORT_WEBSOCKET if upgrade else PORT_HTTP
        tenant = self._authenticate(request)
        call = port_call(request.rel_url, reserved=self.proxy.port)
        ip, token = self._reach(tenant, call.sandbox_id)
        ports = self.proxy.ports
        with self.in_flight.hold(tenant, WAIT if upgrade else CALL):
            try:
                if upgrade:
                    return await ports.websocket(request, ip, token, call.target)
                return await ports.forward(request, ip, token, call.target)
            except FacadeError as e:
                self.metrics.proxy_errors.labels(e.reason).inc()
                raise

    async def _command_body(self, request: web.Request, entry: AuditEntry) -> bytes | None:
        """A command operation's body, read to log its command when its size is declared
        and within the bound (facade/audit.py); None: it streams through unread."""
        size = request.content_length
        limit = self.audit.settings.command_body_bytes
        if not self.audit.enabled or entry.operation not in COMMAND_OPERATIONS:
            return None
        if size is None or size > limit:
            return None
        body = await request.read()
        entry.command, entry.command_truncated = command_of(body, self.audit.settings.command_bytes)
        return body

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
