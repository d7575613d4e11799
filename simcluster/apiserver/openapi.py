"""Upstream's OpenAPI schemas for the kinds served, as the ``components`` of /openapi/v3/<gv>.

``kubectl explain`` reads the group-version's OpenAPI v3 document, finds the kind's schema by
its ``x-kubernetes-group-version-kind`` and follows ``$ref``/``allOf`` down the field path.
The schemas are upstream's own, not written here: the ``kubernetes-validate`` package ships
the API's definitions for every release (its ``_definitions.json``, ~1.3 MB per release,
generated from the kube-apiserver's OpenAPI), and this module serves the release simcluster
reports as its version. They are read the first time a document is asked for (about 10 ms
with msgspec), never at start-up, and each group-version's components are built once.

What the package's JSON Schema 2020-12 form differs in from the OpenAPI 3.0 upstream serves,
and is converted back: ``#/$defs/`` references (``#/components/schemas/``), nullable types
written as ``["string", "null"]`` (the type alone), a ``$ref`` with sibling keywords
(``allOf: [{$ref}]`` with the siblings, as upstream writes a field's description), and the
``enum`` it adds to every kind's ``apiVersion`` and ``kind``.

Custom resources get their CRD's ``openAPIV3Schema`` for the version, named and marked as
upstream's apiextensions server publishes them (``<reversed group>.<version>.<Kind>``, its
``x-kubernetes-group-version-kind``, ``metadata`` referring to ObjectMeta); the CRDs are read
from the store at each request, so an updated schema is served at once.

The official ``kubernetes`` client's models were the other candidate: they carry field
names and Python types, not the API's descriptions, formats or list-map keys, so
``explain`` would print empty fields.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec

from simcluster.apiserver.resources import ResourceType

__all__ = ["OpenApiSchemas"]

Obj = dict[str, Any]
_DEFS, _COMPONENTS = "#/$defs/", "#/components/schemas/"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def _definitions_file(release: str) -> Path | None:
    """The package's definitions of ``release`` (found without importing the package,
    whose import pulls in jsonschema)."""
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        return None
    base = Path(next(iter(spec.submodule_search_locations)))
    path = base / "kubernetes-json-schema" / f"v{release}.0-local" / "_definitions.json"
    return path if path.is_file() else None


def _convert(node: Any) -> Any:
    """One JSON Schema 2020-12 node as the OpenAPI 3.0 upstream serves it."""
    if isinstance(node, list):
        return [_convert(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: Obj = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            if len(types) == 1:
                out["type"] = types[0]
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _convert_property(name, v) for name, v in value.items()}
            continue
        out[key] = _convert(value)
    ref = out.pop("$ref", None)
    if isinstance(ref, str):
        ref = ref.replace(_DEFS, _COMPONENTS)
        return {"allOf": [{"$ref": ref}], **out} if out else {"$ref": ref}
    return out


def _convert_property(name: str, schema: Any) -> Any:
    out = _convert(schema)
    if name in ("apiVersion", "kind") and isinstance(out, dict):
        out.pop("enum", None)
    return out


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_DEFS):
            found.add(ref[len(_DEFS) :])
        for value in node.values():
            _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def _served_gvk(schema: Obj, kinds: set[tuple[str, str, str]]) -> bool:
    gvks = schema.get("x-kubernetes-group-version-kind") or []
    return any((g.get("group", ""), g.get("version"), g.get("kind")) in kinds for g in gvks)


class OpenApiSchemas:
    """The definitions of one Kubernetes release, loaded on first use; per group-version,
    the schemas of its served kinds and everything they reference."""

    def __init__(self, release: str, crds: Callable[[], Iterable[Obj]] = tuple) -> None:
        self.release = release
        self.crds = crds  # the CustomResourceDefinitions stored now
        self._defs: dict[str, Obj] | None = None
        self._built: dict[tuple[str, ...], Obj] = {}

    def _definitions(self) -> dict[str, Obj]:
        if self._defs is None:
            path = _definitions_file(self.release)
            raw = msgspec.json.decode(path.read_bytes()) if path is not None else {}
            self._defs = dict(raw.get("$defs") or {})
        return self._defs

    def components(self, rts: list[ResourceType]) -> Obj:
        """``components.schemas`` for the kinds of one group-version."""
        builtin = [rt for rt in rts if rt.builtin]
        key = tuple(sorted(f"{rt.group}/{rt.version}/{rt.kind}" for rt in builtin))
        if key not in self._built:
            self._built[key] = self._build({(rt.group, rt.version, rt.kind) for rt in builtin})
        custom = [rt for rt in rts if not rt.builtin]
        if not custom:
            return self._built[key]
        return {**self._built[key], **self._custom(custom)}

    def _crd_versions(self, rts: list[ResourceType]) -> Iterable[tuple[ResourceType, Obj, Obj]]:
        """(type, its CRD, the CRD's entry for the type's version)."""
        by_name = {(c.get("metadata") or {}).get("name"): c for c in self.crds()}
        for rt in rts:
            crd = by_name.get(f"{rt.plural}.{rt.group}")
            for ver in ((crd or {}).get("spec") or {}).get("versions") or []:
                if ver.get("name") == rt.version:
                    yield rt, crd or {}, ver

    def _custom(self, rts: list[ResourceType]) -> Obj:
        out: Obj = {}
        for rt, _, ver in self._crd_versions(rts):
            schema = ((ver.get("schema") or {}).get("openAPIV3Schema")) or {"type": "object"}
            schema = dict(schema)
            properties = dict(schema.get("properties") or {})
            properties.setdefault("apiVersion", {"type": "string"})
            properties.setdefault("kind", {"type": "string"})
            properties["metadata"] = {"allOf": [{"$ref": _COMPONENTS + _OBJECT_META}]}
            schema["properties"] = properties
            gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
            schema["x-kubernetes-group-version-kind"] = [gvk]
            group = ".".join(reversed(rt.group.split(".")))
            out[f"{group}.{rt.version}.{rt.kind}"] = schema
        if out:
            out.update(self._build(set(), roots=[_OBJECT_META]))
        return out

    def _build(self, kinds: set[tuple[str, str, str]], roots: Iterable[str] = ()) -> Obj:
        defs = self._definitions()
        todo = [name for name, schema in defs.items() if _served_gvk(schema, kinds)]
        todo.extend(roots)
        chosen: set[str] = set()
        while todo:
            name = todo.pop()
            if name in chosen or name not in defs:
                continue
            chosen.add(name)
            found: set[str] = set()
            _refs(defs[name], found)
            todo.extend(found - chosen)
        return {name: _convert(defs[name]) for name in sorted(chosen)}

    def digest(self, rts: list[ResourceType]) -> str:
        """The document's hash for ``serverRelativeURL``: kubectl caches a document by it,
        so it changes with the kinds served (a CRD's) and the release."""
        served = sorted(f"{rt.group}/{rt.version}/{rt.plural}/{rt.kind}" for rt in rts)
        custom = [rt for rt in rts if not rt.builtin]
        schemas = sorted(
            str((crd.get("metadata") or {}).get("resourceVersion"))
            for _, crd, _ in self._crd_versions(custom)
        )
        text = "\n".join([self.release, *served, *schemas])
        return hashlib.sha256(text.encode()).hexdigest()[:32].upper()
