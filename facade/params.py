"""Decoding a request into its wire models: body, query string, path parameters, headers.

One place turns bytes into typed values, with the route table's models (facade/routes.py),
so every operation validates the same way and every failure is a 400 with a reason a program
can act on. The reasons follow one rule:

- a query, path or header parameter ``x`` that is invalid: ``invalid_x`` (``invalid_limit``,
  ``invalid_timeout_s``, ``invalid_owner``, ``invalid_continue``, ``invalid_idempotency_key``);
  a required one missing: ``x_required`` (``owner_required``); an unknown one:
  ``unknown_parameter``;
- a body that is missing, not JSON, or not the model: ``invalid_request`` / ``invalid_json``,
  except the fields trainers get wrong most, named for what they are: ``invalid_owner``,
  ``invalid_image``, ``invalid_env``, ``invalid_label``.

JSON Schema's ``integer`` includes integral numbers written as floats (``60.0``); msgspec's
``int`` does not, so a body is decoded to plain values first and integral floats become ints
before the model's checks run (a float field takes ints either way). Query strings are text:
their numbers are read by msgspec's lenient conversion, and the models' bounds reject
``nan``/``inf`` like any number out of range.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from .errors import FacadeError

__all__ = ["decode_body", "decode_headers", "decode_path", "decode_query"]

T = TypeVar("T")
_BODY_REASONS = {
    "owner": "invalid_owner",
    "image": "invalid_image",
    "env": "invalid_env",
    "labels": "invalid_label",
}
_AT = re.compile(r"`(\$[^`]*)`\s*$")
_NAME = re.compile(r"\.(\w+)")
_MISSING = re.compile(r"missing required field `([^`]+)`")


async def decode_body(request: web.Request, model: type[T]) -> T:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as e:
        limit = request.app._client_max_size
        raise FacadeError(413, "body_too_large", f"request body over {limit} bytes") from e
    if not raw.strip():
        raise FacadeError(400, "invalid_request", "a JSON body is required")
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise FacadeError(400, "invalid_json", f"the body is not valid JSON: {e}") from e
    try:
        return msgspec.convert(_integral(data), type=model)
    except msgspec.ValidationError as e:
        raise FacadeError(400, _body_reason(e), str(e)) from e


def decode_query(request: web.Request, model: type[T]) -> T:
    fields = {f.encode_name: f for f in msgspec.structs.fields(model)}  # type: ignore[arg-type]
    for name in request.query:
        if name not in fields:
            raise FacadeError(400, "unknown_parameter", f"unknown query parameter {name!r}")
    values: dict[str, Any] = {}
    for name, field in fields.items():
        found = request.query.getall(name, [])
        if _is_list(field.type):
            values[name] = found
        elif len(found) > 1:
            raise FacadeError(400, f"invalid_{name}", f"{name} is given more than once")
        elif found:
            values[name] = found[0]
    try:
        return msgspec.convert(values, type=model, strict=False)
    except msgspec.ValidationError as e:
        raise FacadeError(400, _parameter_reason(e), f"query: {e}") from e


def decode_path(request: web.Request, types: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    return {name: _one(request.match_info[name], name, tp) for name, tp in types}


def decode_headers(request: web.Request, types: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    return {
        name: _one(request.headers[name], name, tp) for name, tp in types if name in request.headers
    }


def _one(value: str, name: str, tp: Any) -> Any:
    try:
        return msgspec.convert(value, type=tp)
    except msgspec.ValidationError as e:
        reason = "invalid_" + name.lower().replace("-", "_")
        raise FacadeError(400, reason, f"{name}: {e}") from e


def _integral(value: Any) -> Any:
    """``value`` with every integral float an int (JSON Schema's ``integer``)."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, list):
        return [_integral(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    return value


def _is_list(tp: Any) -> bool:
    return getattr(tp, "__origin__", None) is list or tp is list


def _path(e: msgspec.ValidationError) -> list[str]:
    found = _AT.search(str(e))
    return _NAME.findall(found.group(1)) if found else []


def _body_reason(e: msgspec.ValidationError) -> str:
    return next((_BODY_REASONS[n] for n in _path(e) if n in _BODY_REASONS), "invalid_request")


def _parameter_reason(e: msgspec.ValidationError) -> str:
    missing = _MISSING.search(str(e))
    if missing:
        return f"{missing.group(1)}_required"
    names = _path(e)
    return f"invalid_{names[0]}" if names else "invalid_request"
