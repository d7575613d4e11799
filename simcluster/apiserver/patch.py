"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch.

Strategic merge patch is implemented for what ``kubectl apply`` (client-side) and Sandman send:
lists of maps merged by their upstream ``patchMergeKey`` (containers by name, ports by port,
conditions by type, ...), primitive merge lists (finalizers), and the directives
``$patch: replace|delete|merge``, ``$retainKeys``, ``$deleteFromPrimitiveList/<f>`` and
``$setElementOrder/<f>``. Merge keys are looked up by field name (the upstream schema is not
shipped); lists not in the table are replaced atomically, as upstream does for them.
"""

from __future__ import annotations

import copy
from typing import Any

from simcluster.errors import BadRequest, Invalid, UnsupportedMediaType

__all__ = [
    "apply_patch",
    "json_patch",
    "merge_key_for",
    "merge_patch",
    "strategic_merge_patch",
    "unsupported_patch_type",
]

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"

# field name -> merge key, for lists upstream marks patchStrategy=merge.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "addresses": "type",
    "images": "names",
}
_PRIMITIVE_MERGE = frozenset({"finalizers"})


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise BadRequest(f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for p in parts:
        if isinstance(cur, dict):
            if p not in cur:
                raise Invalid(
                    f"the server rejected our request due to an error in our request: missing path {p!r}"  # noqa: E501
                )
            cur = cur[p]
        elif isinstance(cur, list):
            try:
                cur = cur[int(p)]
            except (ValueError, IndexError):
                raise Invalid(f"the server rejected our request: bad array index {p!r}")
        else:
            raise Invalid(f"the server rejected our request: cannot descend into {p!r}")
    return cur


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            idx = int(last)
            if idx > len(parent):
                raise Invalid(f"the server rejected our request: index {idx} out of bounds")
            parent.insert(idx, value)
    else:
        raise Invalid("the server rejected our request: add target is not a container")
    return doc


def _remove(doc: Any, parts: list[str]) -> tuple[Any, Any]:
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise Invalid(
                f"the server rejected our request: unable to remove nonexistent key: {last}"
            )
        return doc, parent.pop(last)
    if isinstance(parent, list):
        try:
            return doc, parent.pop(int(last))
        except (ValueError, IndexError):
            raise Invalid(f"the server rejected our request: bad array index {last!r}")
    raise Invalid("the server rejected our request: remove target is not a container")


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902, including ``test``; a failing op rejects the whole patch (422)."""
    if not isinstance(ops, list):
        raise BadRequest("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise BadRequest(f"invalid json patch operation: {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            doc, _ = _remove(doc, parts)
        elif kind == "replace":
            _resolve(doc, parts)
            doc, _ = _remove(doc, parts) if parts else (doc, None)
            doc = _add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "move":
            doc, value = _remove(doc, _pointer(op["from"]))
            doc = _add(doc, parts, value)
        elif kind == "copy":
            doc = _add(doc, parts, copy.deepcopy(_resolve(doc, _pointer(op["from"]))))
        elif kind == "test":
            if _resolve(doc, parts) != op.get("value"):
                raise Invalid(
                    f"the server rejected our request: test operation failed at {op['path']}"
                )
        else:
            raise BadRequest(f"unknown json patch operation {kind!r}")
    return doc


def merge_key_for(field: str, items: list[Any]) -> str | None:
    """The merge key of list ``field`` (None: the list is atomic)."""
    if field == "ports":
        sample = next((i for i in items if isinstance(i, dict)), {})
        return "containerPort" if "containerPort" in sample else "port"
    return _MERGE_KEYS.get(field)


def _smp_list(
    field: str, original: list[Any], patch: list[Any], order: list[Any] | None
) -> list[Any]:
    if field in _PRIMITIVE_MERGE:
        out = list(original)
        out.extend(v for v in patch if v not in out)
        return out
    key = merge_key_for(field, original + patch)
    if key is None:
        return [strategic_merge_patch(None, p) if isinstance(p, dict) else p for p in patch]
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [
            _strip(p) for p in patch if not (isinstance(p, dict) and p.get("$patch") == "replace")
        ]
    out = [copy.deepcopy(o) for o in original]
    for item in patch:
        if not isinstance(item, dict):
            out.append(item)
            continue
        ident = item.get(key)
        idx = next(
            (i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == ident), None
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(_strip(item))
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    if order:
        rank = {(o.get(key) if isinstance(o, dict) else o): i for i, o in enumerate(order)}
        out.sort(key=lambda o: rank.get(o.get(key) if isinstance(o, dict) else o, len(rank)))
    return out


def _strip(value: Any) -> Any:
    """Remove directives from a value that is inserted whole."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def strategic_merge_patch(original: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return _strip(patch)
    if patch.get("$patch") == "delete":
        return None
    result = dict(original) if isinstance(original, dict) else {}
    orders = {k.split("/", 1)[1]: v for k, v in patch.items() if k.startswith("$setElementOrder/")}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
        elif key.startswith("$"):
            continue
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _smp_list(key, result[key], value, orders.get(key))
        elif isinstance(value, list):
            result[key] = _smp_list(key, [], value, orders.get(key))
        else:
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def apply_patch(content_type: str, target: dict[str, Any], body: Any, *, strategic_ok: bool) -> Any:
    """Apply a PATCH body by its Content-Type, as the real server dispatches it."""
    ctype = content_type.split(";")[0].strip()
    if ctype == MERGE:
        return merge_patch(target, body)
    if ctype == JSON_PATCH:
        return json_patch(target, body)
    if ctype == STRATEGIC and strategic_ok:
        return strategic_merge_patch(target, body)
    raise unsupported_patch_type(strategic_ok=strategic_ok)


def unsupported_patch_type(*, strategic_ok: bool) -> UnsupportedMediaType:
    """Upstream's 415 for a patch type the resource does not accept (``patchTypes`` of the
    patch handler), naming the ones it does."""
    return UnsupportedMediaType(
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{JSON_PATCH}, {MERGE}" + (f", {STRATEGIC}" if strategic_ok else "")
    )
