"""The facade's API surface as data: one row per operation (router and OpenAPI from it).

Each row names the wire models of its body, its query string (one Struct per operation,
``sandman.wire.facade``), its validated path parameters and headers, and the statuses it
answers. The router decodes every request with those models (``facade/params.py``) and the
OpenAPI document describes them from the same rows, so what the document calls a valid
request is what the server accepts (generated-input tests hold the two to it). Each row is a
named constant that the handlers bind to the method serving it (``{routes.CREATE:
self.create, ...}``, facade/handlers.py; ``daemon.sandbox.api.bind`` refuses a row without a
handler or a handler of two rows), so a route leads to its handler and back.

Tool calls (exec, sessions, processes, files, info) are not repeated here: they are the
daemon's own operations (docs/openapi/daemon.json) under ``/v1/sandboxes/{id}/``, forwarded
after the facade has normalised and re-checked the path (``facade/paths.py``), so the
daemon's document is their reference and a new daemon operation needs no facade change.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

import msgspec

from daemon.sandbox.api import Route
from daemon.sandbox.openapi import openapi_document, unauthenticated_get
from sandman.wire import facade as m
from sandman.wire import image_preparation as p
from sandman.wire.errors import Side

__all__ = [
    "CLASSES",
    "CREATE",
    "CREATE_BATCH",
    "GET",
    "GET_PREPARATION",
    "LIST",
    "PREPARE",
    "PROXIED",
    "RELEASE",
    "RELEASE_OWNER",
    "RENEW_LEASE",
    "ROUTES",
    "FacadeRoute",
    "build_document",
]

VERSION = "1.1.0"
#: Daemon operation prefixes forwarded under /v1/sandboxes/{id}/.
PROXIED = ("info", "exec", "sessions", "processes", "files")
IDEMPOTENCY_KEY = "Idempotency-Key"
#: 503 ``facade_stopping``: this replica is shutting down (retry: another one answers).
#: 403 ``class_not_allowed`` / ``registry_not_allowed``: outside the tenant's allow-lists.
#: 429 everywhere a bearer token is read: ``login_throttled`` (facade/fairness.py).
_WRITE_ERRORS = (400, 401, 403, 409, 413, 429, 502, 503)
_CLASS_NOTE = (
    "400 `unknown_class`: `class` is not one of `GET /v1/classes`. 403 `class_not_allowed`, "
    "`registry_not_allowed`: a class or an image registry outside the tenant's allow-lists."
)


@dataclass(frozen=True, slots=True)
class FacadeRoute(Route):
    #: The operation's query string, decoded into this Struct (None: no parameters).
    query_model: type[msgspec.Struct] | None = None
    #: Path parameters validated against a wire type (the rest are plain strings).
    path_types: tuple[tuple[str, Any], ...] = ()
    #: Optional request headers validated against a wire type.
    header_types: tuple[tuple[str, Any], ...] = ()
    #: What the document adds to the summary: rules no schema can state.
    description: str = ""
    #: The answer to a repeat under a used Idempotency-Key (the existing object, not created
    #: again), when it differs from ``status``.
    replay_status: int | None = None


CREATE = FacadeRoute(
    "POST",
    "/v1/sandboxes",
    "create",
    "Create one sandbox (Idempotency-Key header makes retries safe)",
    m.CreateSandbox,
    m.Sandbox,
    status=201,
    errors=_WRITE_ERRORS,
    header_types=((IDEMPOTENCY_KEY, m.IdempotencyKey),),
    description=_CLASS_NOTE,
    replay_status=200,
)

CREATE_BATCH = FacadeRoute(
    "POST",
    "/v1/batches",
    "create_batch",
    "Create `count` sandboxes from one spec in one request",
    m.CreateBatch,
    m.BatchResult,
    status=201,
    errors=_WRITE_ERRORS,
    header_types=((IDEMPOTENCY_KEY, m.IdempotencyKey),),
    description=_CLASS_NOTE
    + " 400 `batch_too_large`: `count` over the tenant's burst or sandbox limit."
    + " 409 `idempotency_key_reused`: the key was used for another spec or count.",
)

LIST = FacadeRoute(
    "GET",
    "/v1/sandboxes",
    "list",
    "List sandboxes (by owner, labels `k=v`, state), paginated",
    None,
    m.SandboxList,
    query_model=m.ListQuery,
    errors=(400, 401, 429, 503),
    description="400 `invalid_continue`: a `continue` token the facade did not issue.",
)

RELEASE_OWNER = FacadeRoute(
    "DELETE",
    "/v1/sandboxes",
    "release_owner",
    "Release every sandbox of an owner (one deletecollection), its image announcements "
    "and its lease",
    None,
    m.OwnerReleased,
    status=202,
    query_model=m.OwnerQuery,
    errors=(400, 401, 429, 502, 503),
)

GET = FacadeRoute(
    "GET",
    "/v1/sandboxes/{id}",
    "get",
    "Get a sandbox; `wait=ready|started|final` waits (watch cache) up to `timeout_s`",
    None,
    m.Sandbox,
    query_model=m.GetQuery,
    errors=(400, 401, 404, 429, 503),
    description="429 `too_many_waits`: the tenant has its `max_waits` long waits open.",
)

RELEASE = FacadeRoute(
    "DELETE",
    "/v1/sandboxes/{id}",
    "release",
    "Release a sandbox (its pod is deleted)",
    None,
    m.Sandbox,
    status=202,
    errors=(401, 404, 429, 502, 503),
)

RENEW_LEASE = FacadeRoute(
    "PUT",
    "/v1/owners/{owner}/lease",
    "renew_lease",
    "Create or renew an owner's lease; when it lapses its sandboxes are collected",
    m.LeaseRenewal,
    m.LeaseStatus,
    errors=(400, 401, 413, 429, 502, 503),
    path_types=(("owner", m.OwnerName),),
)

PREPARE = FacadeRoute(
    "POST",
    "/v1/prepare",
    "prepare",
    "Announce images ahead of a burst (sandboxes expected per image, optional deadline); "
    "the controller has nodes pull them, and with `sandboxes` creates the sandboxes ahead "
    "too (Idempotency-Key header makes retries safe)",
    p.PrepareImages,
    p.Preparation,
    status=201,
    errors=_WRITE_ERRORS,
    header_types=((IDEMPOTENCY_KEY, m.IdempotencyKey),),
    description="400 `duplicate_image`: an image is named twice in `images`."
    " 403 `registry_not_allowed`: an image from a registry outside the tenant's allow-list."
    " 400 `prepare_too_large`: this announcement alone is over the tenant's"
    " `max_prepared_images` or `max_prepared_sandboxes`."
    " 429 `prepare_quota_exceeded`: with the tenant's live announcements it would be"
    " (it fits once they expire or their owner is released)."
    " With `sandboxes`: 400 `unknown_class` / 403 `class_not_allowed` for `class` as a"
    " create; 400 `prepare_too_large` when the counts alone pass the tenant's"
    " `max_sandboxes`; 429 `quota_exceeded` (Retry-After) when live sandboxes plus the"
    " pools of its live announcements would."
    " With an `owner`, the announcement goes when the owner is released or its lease"
    " expires.",
    replay_status=200,
)

GET_PREPARATION = FacadeRoute(
    "GET",
    "/v1/prepare/{id}",
    "get_preparation",
    "Progress of an announcement: nodes ready per image, failures, ETA",
    None,
    p.Preparation,
    errors=(401, 404, 429, 503),
)

CLASSES = FacadeRoute(
    "GET",
    "/v1/classes",
    "classes",
    "Sandbox classes offered (those the tenant may use)",
    None,
    m.ClassList,
    errors=(400, 401, 429),
)

#: Every operation of the facade's own, in the order the router and the document take them.
ROUTES: tuple[FacadeRoute, ...] = (
    CREATE,
    CREATE_BATCH,
    LIST,
    RELEASE_OWNER,
    GET,
    RELEASE,
    RENEW_LEASE,
    PREPARE,
    GET_PREPARATION,
    CLASSES,
)


def _schema(tp: Any) -> dict[str, Any]:
    schema: dict[str, Any] = msgspec.json.schema(tp)
    return schema


def _query_parameters(model: type[msgspec.Struct]) -> list[dict[str, Any]]:
    _, components = msgspec.json.schema_components([model])
    struct = components[model.__name__]
    required = set(struct.get("required", ()))
    params = []
    for name, schema in struct["properties"].items():
        param: dict[str, Any] = {"name": name, "in": "query", "required": name in required}
        if description := schema.pop("description", None):
            param["description"] = description
        param["schema"] = schema
        params.append(param)
    return params


def _parameters(route: FacadeRoute) -> list[dict[str, Any]]:
    typed = dict(route.path_types)
    params = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": _schema(typed[name]) if name in typed else {"type": "string"},
        }
        for name in (p[1:-1] for p in route.path.split("/") if p.startswith("{"))
    ]
    if route.query_model is not None:
        params += _query_parameters(route.query_model)
    params += [
        {"name": name, "in": "header", "required": False, "schema": _schema(tp)}
        for name, tp in route.header_types
    ]
    return params


def _proxied_paths() -> dict[str, dict[str, Any]]:
    note = (
        "Forwarded to the sandbox daemon's `/v1/{op}...` (see docs/openapi/daemon.json) "
        "once the path is normalised and matches a daemon operation (400 invalid_path: "
        "a segment that is empty, `.`, `..` or outside `[A-Za-z0-9._~-]`, also "
        "percent-encoded; 404 not_found, 405 method_not_allowed otherwise); "
        "409 sandbox_not_ready, 410 sandbox_terminated, 429 too_many_calls / "
        "too_many_waits (the tenant's caps), 502 daemon_unreachable, "
        "504 daemon_timeout come from the facade."
    )
    ports = (
        "Any method: a server listening on `port` inside the sandbox, reached through its "
        "daemon (`/v1/ports/{port}/{path}` of docs/openapi/daemon.json) with the path and "
        "query as sent; the caller's Authorization and hop-by-hop headers are not passed on; "
        "a WebSocket upgrade is relayed message by message. 400 `invalid_port`, "
        "`port_reserved` (the daemon's port), `invalid_path` (a dot-segment, an encoded `/` "
        "or `\\`, an empty segment before the last); 502 `port_not_listening` (nothing "
        "listens), `upgrade_refused`; the sandbox's own answers otherwise, unchanged; "
        "409/410/429/502/504 as for tool calls. Error answers of the facade and the daemon "
        "carry `x-sandman-reason`."
    )
    paths = {
        f"/v1/sandboxes/{{id}}/{op}": {
            "description": note.replace("{op}", op),
        }
        for op in PROXIED
    }
    return paths | {"/v1/sandboxes/{id}/ports/{port}/{path}": {"description": ports}}


def build_document() -> dict[str, Any]:
    extra = {
        "/healthz": unauthenticated_get("healthz", "Liveness (no auth)"),
        "/readyz": unauthenticated_get("readyz", "Readiness: watch caches synced (no auth)"),
        "/metrics": unauthenticated_get("metrics", "Prometheus metrics (no auth)"),
    }
    document = openapi_document(
        ROUTES,
        title="Sandman facade",
        version=VERSION,
        query_types={},
        extra_paths=extra,
        side=Side.FACADE,
    )
    for route in ROUTES:
        methods = document["paths"][route.path]
        operation = methods[route.method.lower()]
        head = {"operationId": operation.pop("operationId"), "summary": operation.pop("summary")}
        if route.description:
            head["description"] = route.description
        operation.pop("parameters", None)
        if params := _parameters(route):
            head["parameters"] = params
        if route.replay_status is not None:
            ok = operation["responses"][str(route.status)]
            replay = ok | {"description": "the same request under a used Idempotency-Key"}
            operation["responses"][str(route.replay_status)] = replay
        methods[route.method.lower()] = head | operation
    document["paths"] = dict(sorted((document["paths"] | _proxied_paths()).items()))
    return document


def render() -> str:
    return json.dumps(build_document(), indent=2) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
