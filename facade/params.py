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

from sandman.wire.errors import Reason

from .errors import FacadeError

__all__ = ["decode_body", "decode_headers", "decode_path", "decode_query", "invalid", "required"]

T = TypeVar("T")
_BODY_REASONS = {
    "owner": Reason.INVALID_OWNER,
    "image": Reason.INVALID_IMAGE,
    "env": Reason.INVALID_ENV,
    "labels": Reason.INVALID_LABEL,
}
_AT = re.compile(r"`(\$[^`]*)`\s*$")
_NAME = re.compile(r"\.(\w+)")
_MISSING = re.compile(r"missing required field `([^`]+)`")


async def decode_body(request: web.Request, model: type[T]) -> T:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as e:
        limit = request.app._client_max_size
        raise FacadeError(f"request body over {limit} bytes", reason=Reason.BODY_TOO_LARGE) from e
    if not raw.strip():
        raise FacadeError("a JSON body is required", reason=Reason.INVALID_REQUEST)
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise FacadeError(f"the body is not valid JSON: {e}", reason=Reason.INVALID_JSON) from e
    try:
        return msgspec.convert(_integral(data), type=model)
    except msgspec.ValidationError as e:
        raise FacadeError(str(e), reason=_body_reason(e)) from e


def decode_query(request: web.Request, model: type[T]) -> T:
    fields = {f.encode_name: f for f in msgspec.structs.fields(model)}  # type: ignore[arg-type]
    for name in request.query:
        if name not in fields:
            raise FacadeError(f"unknown query parameter {name!r}", reason=Reason.UNKNOWN_PARAMETER)
    values: dict[str, Any] = {}
    for name, field in fields.items():
        found = request.query.getall(name, [])
        if _is_list(field.type):
            values[name] = found
        elif len(found) > 1:
            raise FacadeError(f"{name} is given more than once", reason=invalid(name))
        elif found:
            values[name] = found[0]
    try:
        return msgspec.convert(values, type=model, strict=False)
    except msgspec.ValidationError as e:
        raise FacadeError(f"query: {e}", reason=_parameter_reason(e)) from e


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
        raise FacadeError(f"{name}: {e}", reason=invalid(name)) from e


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


def _body_reason(e: msgspec.ValidationError) -> Reason:
    return next((_BODY_REASONS[n] for n in _path(e) if n in _BODY_REASONS), Reason.INVALID_REQUEST)


def _parameter_reason(e: msgspec.ValidationError) -> Reason:
    missing = _MISSING.search(str(e))
    if missing:
        return required(missing.group(1))
    names = _path(e)
    return invalid(names[0]) if names else Reason.INVALID_REQUEST


def invalid(parameter: str) -> Reason:
    """``invalid_x`` for parameter ``x`` (a header's name lower-cased, ``-`` as ``_``).

    The table must have the row: tests/test_error_reasons.py holds every parameter of the
    route table to it, so a new parameter without one fails there, not as a 500 here."""
    return Reason.named("invalid_" + parameter.lower().replace("-", "_"))


def required(parameter: str) -> Reason:
    """``x_required`` for a missing required parameter ``x``."""
    return Reason.named(f"{parameter}_required")
