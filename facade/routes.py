"""The facade's API surface as data: one row per operation (router and OpenAPI from it).

Tool calls (exec, sessions, processes, files, info) are not repeated here: they are the
daemon's own operations (docs/openapi/daemon.json) under ``/v1/sandboxes/{id}/``, forwarded
unchanged, so the daemon's document is their reference and a new daemon operation needs no
facade change.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from daemon.sandbox.api import Route
from daemon.sandbox.openapi import openapi_document, unauthenticated_get
from sandman.wire import facade as m
from sandman.wire import prepare as p

__all__ = ["PROXIED", "ROUTES", "build_document"]

VERSION = "1.0.0"
#: Daemon operation prefixes forwarded under /v1/sandboxes/{id}/.
PROXIED = ("info", "exec", "sessions", "processes", "files")
_WRITE_ERRORS = (400, 401, 409, 413, 429, 502, 503)

ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        "/v1/sandboxes",
        "create",
        "Create one sandbox (Idempotency-Key header makes retries safe)",
        m.CreateSandbox,
        m.Sandbox,
        status=201,
        errors=_WRITE_ERRORS,
    ),
    Route(
        "POST",
        "/v1/batches",
        "create_batch",
        "Create `count` sandboxes from one spec in one request",
        m.CreateBatch,
        m.BatchResult,
        status=201,
        errors=_WRITE_ERRORS,
    ),
    Route(
        "GET",
        "/v1/sandboxes",
        "list",
        "List sandboxes (by owner, labels `k=v`, state), paginated",
        None,
        m.SandboxList,
        query=("owner", "label", "state", "limit", "continue"),
    ),
    Route(
        "DELETE",
        "/v1/sandboxes",
        "release_owner",
        "Release every sandbox of an owner (one deletecollection) and its lease",
        None,
        m.OwnerReleased,
        status=202,
        query=("owner",),
        errors=(400, 401, 429, 503),
    ),
    Route(
        "GET",
        "/v1/sandboxes/{id}",
        "get",
        "Get a sandbox; `wait=ready|started|final` waits (watch cache) up to `timeout_s`",
        None,
        m.Sandbox,
        query=("wait", "timeout_s"),
        errors=(400, 401, 404),
    ),
    Route(
        "DELETE",
        "/v1/sandboxes/{id}",
        "release",
        "Release a sandbox (its pod is deleted)",
        None,
        m.Sandbox,
        status=202,
        errors=(401, 404, 429, 503),
    ),
    Route(
        "PUT",
        "/v1/owners/{owner}/lease",
        "renew_lease",
        "Create or renew an owner's lease; when it lapses its sandboxes are collected",
        m.LeaseRenewal,
        m.LeaseStatus,
        errors=(400, 401, 429, 503),
    ),
    Route(
        "POST",
        "/v1/prepare",
        "prepare",
        "Announce images ahead of a burst (sandboxes expected per image, optional deadline); "
        "the controller has nodes pull them (Idempotency-Key header makes retries safe)",
        p.PrepareImages,
        p.Preparation,
        status=201,
        errors=_WRITE_ERRORS,
    ),
    Route(
        "GET",
        "/v1/prepare/{id}",
        "get_preparation",
        "Progress of an announcement: nodes ready per image, failures, ETA",
        None,
        p.Preparation,
        errors=(401, 404, 429, 503),
    ),
    Route("GET", "/v1/classes", "classes", "Sandbox classes offered", None, m.ClassList),
)

QUERY_TYPES = {"limit": "integer", "timeout_s": "number"}


def _proxied_paths() -> dict[str, dict[str, Any]]:
    note = (
        "Forwarded to the sandbox daemon's `/v1/{op}...` (see docs/openapi/daemon.json); "
        "409 sandbox_not_ready, 410 sandbox_terminated, 502 daemon_unreachable, "
        "504 daemon_timeout come from the facade."
    )
    return {
        f"/v1/sandboxes/{{id}}/{op}": {
            "description": note.replace("{op}", op),
        }
        for op in PROXIED
    }


def build_document() -> dict[str, Any]:
    extra = {
        "/healthz": unauthenticated_get("healthz", "Liveness (no auth)"),
        "/readyz": unauthenticated_get("readyz", "Readiness: watch caches synced (no auth)"),
        "/metrics": unauthenticated_get("metrics", "Prometheus metrics (no auth)"),
    }
    return openapi_document(
        ROUTES,
        title="Sandman facade",
        version=VERSION,
        query_types=QUERY_TYPES,
        extra_paths=extra | _proxied_paths(),
    )


def render() -> str:
    return json.dumps(build_document(), indent=2) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
