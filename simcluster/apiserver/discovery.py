"""Discovery documents (/version, /api, /apis, group versions), a minimal OpenAPI v3 and the
server-side Table format — what kubectl, kr8s and the official client need to find and print
resources.

kubectl asks for aggregated discovery (apidiscovery.k8s.io/v2) and falls back to these legacy
documents when the response's content type is plain JSON. The OpenAPI v3 documents declare,
per kind, that PATCH accepts ``fieldValidation`` and which patch types it takes (what kubectl
reads to decide to validate server-side), and carry upstream's schemas of the kinds served
(``openapi``: what ``kubectl explain`` reads).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any

from simcluster.apiserver.openapi import OpenApiSchemas
from simcluster.apiserver.resources import Registry, ResourceType

__all__ = [
    "api_group",
    "api_groups",
    "api_resources",
    "api_versions",
    "openapi_gv",
    "openapi_root",
    "openapi_schemas",
    "table",
    "version_info",
]

Obj = dict[str, Any]
KUBE_VERSION = ("1", "32")


def version_info() -> Obj:
    major, minor = KUBE_VERSION
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{major}.{minor}.0-simcluster",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def api_group(reg: Registry, group: str) -> Obj:
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in reg.versions(group)]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": versions,
        "preferredVersion": versions[0],
    }


def api_groups(reg: Registry) -> Obj:
    groups = [api_group(reg, g) for g in reg.group_order if g]
    for g in groups:
        del g["kind"], g["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resources(reg: Registry, group: str, version: str) -> Obj:
    resources: list[Obj] = []
    for rt in sorted(reg.in_version(group, version), key=lambda r: r.plural):
        resources.extend(rt.discovery_entries())
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_schemas(crds: Callable[[], Iterable[Obj]] = tuple) -> OpenApiSchemas:
    """The upstream schemas of the release this server reports (``KUBE_VERSION``), and the
    schemas of the CRDs ``crds`` returns."""
    return OpenApiSchemas(".".join(KUBE_VERSION), crds)


def openapi_root(reg: Registry, schemas: OpenApiSchemas) -> Obj:
    paths = {}
    for group in reg.group_order:
        for version in reg.versions(group):
            p = _gv_path(group, version)
            digest = schemas.digest(reg.in_version(group, version))
            paths[p] = {"serverRelativeURL": f"/openapi/v3/{p}?hash={digest}"}
    return {"paths": paths}


def _patch_op(rt: ResourceType) -> Obj:
    types = [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ]
    if rt.builtin:
        types.append("application/strategic-merge-patch+json")
    return {
        "x-kubernetes-group-version-kind": {
            "group": rt.group,
            "version": rt.version,
            "kind": rt.kind,
        },
        "parameters": [
            {
                "name": "fieldValidation",
                "in": "query",
                "schema": {"type": "string", "uniqueItems": True},
            },
            {
                "name": "fieldManager",
                "in": "query",
                "schema": {"type": "string", "uniqueItems": True},
            },
        ],
        "requestBody": {"content": {t: {"schema": {"type": "object"}} for t in types}},
        "responses": {"200": {"description": "OK"}},
    }


def openapi_gv(reg: Registry, group: str, version: str, schemas: OpenApiSchemas) -> Obj | None:
    rts = reg.in_version(group, version)
    if not rts:
        return None
    paths: Obj = {}
    base = "/" + _gv_path(group, version)
    for rt in rts:
        # (bindings has no PATCH upstream; it is listed so kubectl's fieldValidation probe,
        # which only inspects PATCH operations, finds every kind and validates server-side)
        path = (
            f"{base}/namespaces/{{namespace}}/{rt.plural}/{{name}}"
            if rt.namespaced
            else f"{base}/{rt.plural}/{{name}}"
        )
        paths[path] = {"patch": _patch_op(rt)}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0-simcluster"},
        "paths": paths,
        "components": {"schemas": schemas.components(rts)},
    }


# --- server-side printing (Table) ------------------------------------------------------
def _age(created: str | None, now: dt.datetime) -> str:
    if not created:
        return "<unknown>"
    t = dt.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    s = max(int((now - t).total_seconds()), 0)
    if s < 120:
        return f"{s}s"
    if s < 3600 * 3:
        return f"{s // 60}m"
    if s < 86400 * 2:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def _col(name: str, priority: int = 0, fmt: str = "") -> Obj:
    return {
        "name": name,
        "type": "string",
        "format": fmt,
        "description": name,
        "priority": priority,
    }


def _pod_cells(o: Obj) -> list[Any]:
    status, spec = o.get("status") or {}, o.get("spec") or {}
    cs = status.get("containerStatuses") or []
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in cs)
    phase = status.get("reason") or status.get("phase", "")
    if o["metadata"].get("deletionTimestamp"):
        phase = "Terminating"
    return [
        f"{ready}/{len(spec.get('containers') or [])}",
        phase,
        restarts,
        None,
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
    ]


def _node_cells(o: Obj) -> list[Any]:
    conds = {
        c.get("type"): c.get("status") for c in (o.get("status") or {}).get("conditions") or []
    }
    state = "Ready" if conds.get("Ready") == "True" else "NotReady"
    if (o.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    version = ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [state, "<none>", None, version]


def _apiservice_cells(o: Obj) -> list[Any]:
    """kube-aggregator's printer: the backing service or Local, and Available as "True" or
    "False (reason)"."""
    service = (o.get("spec") or {}).get("service")
    backend = f"{service.get('namespace')}/{service.get('name')}" if service else "Local"
    conds = (o.get("status") or {}).get("conditions") or []
    available = next((c for c in conds if c.get("type") == "Available"), None)
    shown = "Unknown"
    if available is not None:
        shown = available.get("status", "Unknown")
        if shown != "True" and available.get("reason"):
            shown = f"{shown} ({available['reason']})"
    return [backend, shown, None]


_COLUMNS: dict[str, tuple[list[Obj], Any]] = {
    "apiregistration.k8s.io/apiservices": (
        [_col("Service"), _col("Available"), _col("Age")],
        _apiservice_cells,
    ),
    "/pods": (
        [
            _col("Ready"),
            _col("Status"),
            _col("Restarts"),
            _col("Age"),
            _col("IP", 1),
            _col("Node", 1),
        ],
        _pod_cells,
    ),
    "/nodes": ([_col("Status"), _col("Roles"), _col("Age"), _col("Version")], _node_cells),
    "/namespaces": (
        [_col("Status"), _col("Age")],
        lambda o: [(o.get("status") or {}).get("phase", ""), None],
    ),
}


def table(rt: ResourceType, items: list[Obj], meta: Obj, include: str) -> Obj:
    """Render objects as a meta.k8s.io/v1 Table (``include``: None | Metadata | Object)."""
    now = dt.datetime.now(dt.UTC)
    extra, cells_of = _COLUMNS.get(rt.key, ([_col("Age")], lambda o: [None]))
    rows = []
    for o in items:
        cells = [o["metadata"]["name"], *cells_of(o)]
        age = _age(o["metadata"].get("creationTimestamp"), now)
        cells = [age if c is None else c for c in cells]
        row: Obj = {"cells": cells}
        if include == "Object":
            row["object"] = o
        elif include != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": o["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [_col("Name", 0, "name"), *extra],
        "rows": rows,
    }
