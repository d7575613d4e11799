"""Builds the daemon's OpenAPI 3.1 document from the route table and the wire models.

``python -m daemon.sandbox.openapi > docs/openapi/daemon.json`` regenerates the committed copy;
a test fails when the committed copy and the code disagree. Error answers are the wire model
``ErrorBody``; each error status names the reasons of the side it may carry (one table,
:mod:`sandman.wire.errors`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import msgspec

from sandman.wire.errors import ErrorBody, Reason, Side

from . import __version__
from .api import ROUTES, Route

__all__ = ["build_document", "openapi_document", "unauthenticated_get"]

QUERY_TYPES = {
    "offset": "integer",
    "length": "integer",
    "tail_bytes": "integer",
    "resume_from": "integer",
    "parents": "boolean",
    "recursive": "boolean",
}


PORTS_NOTE = (
    "Any method: forwarded to a server listening on `port` inside the sandbox (the "
    "daemon's own address, then 127.0.0.1) as `/{path}` with the query, the request's "
    "head rewritten (no Authorization, no hop-by-hop headers, its own Host, Connection: "
    "close) and then bytes spliced both ways, a WebSocket upgrade included; the connection "
    "closes after (daemon/sandbox/ports.py). 400 `invalid_port` (not 1-65535), "
    "`port_reserved` (the daemon's own port), `invalid_path` (a dot-segment, an encoded "
    "`/` or `\\`, an empty segment before the last); 502 `port_not_listening`."
)


def _ref(model: type) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _operation(route: Route, query_types: dict[str, str]) -> dict[str, Any]:
    op: dict[str, Any] = {"operationId": route.operation, "summary": route.summary}
    params = [
        {"name": n, "in": "path", "required": True, "schema": {"type": "string"}}
        for n in _path_params(route.path)
    ]
    params += [
        {
            "name": n,
            "in": "query",
            "required": n == "path",
            "schema": {"type": query_types.get(n, "string")},
        }
        for n in route.query
    ]
    if params:
        op["parameters"] = params
    if route.request is not None:
        op["requestBody"] = {
            "required": True,
            "content": {route.request_content: {"schema": _ref(route.request)}},
        }
    elif route.request_content != "application/json":
        op["requestBody"] = {
            "required": True,
            "content": {route.request_content: {"schema": {"type": "string", "format": "binary"}}},
        }
    ok: dict[str, Any] = {"description": "success"}
    if route.response is not None:
        ok["content"] = {route.response_content: {"schema": _ref(route.response)}}
    elif route.response_content != "application/json":
        ok["content"] = {route.response_content: {"schema": {"type": "string", "format": "binary"}}}
    op["responses"] = {str(route.status): ok} | {
        str(code): {"$ref": f"#/components/responses/Error{code}"} for code in route.errors
    }
    return op


def _error_responses(codes: set[int], side: Side) -> dict[str, Any]:
    """One response per error status, naming the reasons ``side`` answers with it."""
    content = {"application/json": {"schema": _ref(ErrorBody)}}
    responses = {}
    for code in sorted(codes):
        reasons = ", ".join(f"`{r}`" for r in Reason if r.status == code and side in r.side)
        description = f"reason: {reasons}" if reasons else "error with a machine-readable reason"
        responses[f"Error{code}"] = {"description": description, "content": content}
    return responses


def _path_params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def openapi_document(
    routes: tuple[Route, ...],
    *,
    title: str,
    version: str,
    query_types: dict[str, str],
    extra_paths: dict[str, dict[str, Any]],
    side: Side,
) -> dict[str, Any]:
    """An OpenAPI 3.1 document for a route table (also used by the facade's); ``side``: whose
    error reasons the error statuses name."""
    models = sorted(
        {m for r in routes for m in (r.request, r.response) if m is not None} | {ErrorBody},
        key=lambda m: m.__name__,
    )
    _, components = msgspec.json.schema_components(
        models, ref_template="#/components/schemas/{name}"
    )
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, query_types)
    paths |= extra_paths
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "security": [{"bearer": []}],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(components.items())),
            "responses": _error_responses({c for r in routes for c in r.errors}, side),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def unauthenticated_get(operation_id: str, summary: str) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "security": [],
            "responses": {"200": {"description": "serving"}},
        }
    }


def build_document() -> dict[str, Any]:
    return openapi_document(
        ROUTES,
        title="Sandman sandbox daemon",
        version=__version__,
        query_types=QUERY_TYPES,
        extra_paths={
            "/healthz": unauthenticated_get("healthz", "Readiness probe (no auth)"),
            "/v1/ports/{port}/{path}": {"description": PORTS_NOTE},
        },
        side=Side.DAEMON,
    )


def render() -> str:
    return json.dumps(build_document(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
