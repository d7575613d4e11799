"""A custom resource held to its CRD's structural schema: pruned, then validated.

Why: upstream's apiextensions server drops every field its CRD's ``openAPIV3Schema`` does
not declare (pruning, unless ``x-kubernetes-preserve-unknown-fields``) and refuses values of
the wrong type or outside their bounds with a 422. A simulator that stored custom resources
as sent would let a CRD fall out of step with the code that writes them — a field the code
relies on would vanish on a real cluster and nowhere in the tests. So this is the subset of
structural-schema validation the CRDs use: ``type`` (object, array, string, integer, number,
boolean), ``properties`` / ``required`` / ``additionalProperties``, ``items``,
``minItems``/``maxItems``, ``minLength``/``maxLength``, ``minimum``/``maximum``, ``enum``,
``x-kubernetes-preserve-unknown-fields`` and ``nullable`` (a null where the schema does
not allow one is pruned, as upstream does before defaulting). The causes read as upstream's
(``spec.images[0].count in body should be greater than or equal to 1``).

``apiVersion``, ``kind`` and ``metadata`` are the object's own (validated elsewhere) and
never pruned.
"""

from __future__ import annotations

from typing import Any

from simcluster.apiserver.validation.fields import Cause, go_value, invalid, required

__all__ = ["prune", "schema_causes"]

Obj = dict[str, Any]
_ROOT = frozenset({"apiVersion", "kind", "metadata"})
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def prune(schema: Obj, obj: Obj) -> None:
    """Drop, in place, every field of ``obj`` the schema does not declare."""
    _prune(schema, obj, root=True)


def _prune(schema: Obj, value: Any, *, root: bool = False) -> None:
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in list(value):
            if root and key in _ROOT:
                continue
            if props is not None and key in props:
                if value[key] is None and not props[key].get("nullable"):
                    del value[key]  # upstream prunes a null the schema does not allow
                    continue
                _prune(props[key], value[key])
            elif isinstance(extra, dict):
                _prune(extra, value[key])
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and extra is not True:
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _prune(schema["items"], item)


def schema_causes(schema: Obj, obj: Obj) -> list[Cause]:
    """What the schema refuses in ``obj`` (its root metadata aside)."""
    causes: list[Cause] = []
    body = {k: v for k, v in obj.items() if k not in _ROOT}
    _check(schema, body, "", causes)
    return causes


def _check(schema: Obj, value: Any, path: str, causes: list[Cause]) -> None:
    if value is None:
        if not schema.get("nullable") and path:
            causes.append(invalid(path, value, f"{path} in body must be of type {_type(schema)}"))
        return
    kind = schema.get("type")
    if kind is not None and not _is(kind, value):
        msg = f"{path or 'body'} in body must be of type {kind}: {go_value(_type_name(value))}"
        causes.append(invalid(path, _type_name(value), msg))
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(go_value(v) for v in schema["enum"])
        msg = f"Unsupported value: {go_value(value)}: supported values: {allowed}"
        causes.append(("FieldValueNotSupported", path, msg))
    if isinstance(value, dict):
        _check_object(schema, value, path, causes)
    elif isinstance(value, list):
        _check_array(schema, value, path, causes)
    elif isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            msg = f"{path} in body should be at least {schema['minLength']} chars long"
            causes.append(invalid(path, value, msg))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            msg = f"Too long: may not be more than {schema['maxLength']} bytes"
            causes.append(("FieldValueTooLong", path, msg))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            msg = f"{path} in body should be greater than or equal to {schema['minimum']}"
            causes.append(invalid(path, value, msg))
        if "maximum" in schema and value > schema["maximum"]:
            msg = f"{path} in body should be less than or equal to {schema['maximum']}"
            causes.append(invalid(path, value, msg))


def _check_object(schema: Obj, value: Obj, path: str, causes: list[Cause]) -> None:
    props = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if name not in value:
            causes.append(required(_join(path, name)))
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        if key in props:
            _check(props[key], item, _join(path, key), causes)
        elif isinstance(extra, dict):
            _check(extra, item, _join(path, key), causes)


def _check_array(schema: Obj, value: list[Any], path: str, causes: list[Cause]) -> None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        msg = f"{path} in body should have at least {schema['minItems']} items"
        causes.append(invalid(path, f"{len(value)} items", msg))
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        msg = f"Too many: {len(value)}: must have at most {schema['maxItems']} items"
        causes.append(("FieldValueTooMany", path, msg))
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _check(items, item, f"{path}[{i}]", causes)


def _is(kind: str, value: Any) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(kind, (object,)))


def _type(schema: Obj) -> str:
    return str(schema.get("type") or "object")


def _type_name(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object"):
        if _is(name, value):
            return name
    return "null"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
