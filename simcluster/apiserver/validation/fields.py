"""Upstream's validation primitives (``k8s.io/apimachinery/pkg/util/validation``) and the
``field.Error`` wording, so a cause reads exactly as the real server's.

A cause is ``(reason, field, message)``: the ``StatusCause`` triple ``errors.Invalid``
renders. Values are shown as Go's ``%#v``/``%q`` would show them (strings quoted, numbers
bare), which is what ``field.Invalid`` does.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "Cause",
    "dns1035_label",
    "dns1123_label",
    "dns1123_subdomain",
    "duplicate",
    "forbidden",
    "go_value",
    "invalid",
    "invalids",
    "label_value",
    "not_found",
    "not_supported",
    "qualified_name",
    "required",
    "too_long",
]

Cause = tuple[str, str, str]

_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + r"(\." + _LABEL_FMT + ")*"
_QUALIFIED_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QUALIFIED_FMT + ")?"
_DNS1035_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_LABEL = re.compile(_LABEL_FMT)
_SUBDOMAIN = re.compile(_SUBDOMAIN_FMT)
_QUALIFIED = re.compile(_QUALIFIED_FMT)
_LABEL_VALUE = re.compile(_LABEL_VALUE_FMT)
_DNS1035 = re.compile(_DNS1035_FMT)

_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
    "an alphabetic character, and end with an alphanumeric character"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character"
)
_QUALIFIED_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character"
)


def go_value(value: Any) -> str:
    """A value as ``field.Invalid`` prints it: strings quoted, numbers and bools bare."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, default=str)


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    shown = ",  or ".join(f"'{e}'" for e in examples)
    return f"{msg} (e.g. {shown}, regex used for validation is '{fmt}')"


def max_len(n: int) -> str:
    return f"must be no more than {n} characters"


# The name checks are pure and see the same few keys (label keys, names) again and again:
# memoised, bounded.
@functools.lru_cache(maxsize=4096)
def dns1123_label(value: str) -> tuple[str, ...]:
    """``IsDNS1123Label``: the messages for a bad value, none for a good one."""
    errs = [max_len(63)] if len(value) > 63 else []
    if not _LABEL.fullmatch(value):
        errs.append(regex_error(_LABEL_MSG, _LABEL_FMT, "my-name", "123-abc"))
    return tuple(errs)


@functools.lru_cache(maxsize=4096)
def dns1035_label(value: str) -> tuple[str, ...]:
    """``IsDNS1035Label``: a label that starts with a letter (API versions, service names)."""
    errs = [max_len(63)] if len(value) > 63 else []
    if not _DNS1035.fullmatch(value):
        errs.append(regex_error(_DNS1035_MSG, _DNS1035_FMT, "my-name", "abc-123"))
    return tuple(errs)


@functools.lru_cache(maxsize=4096)
def dns1123_subdomain(value: str) -> tuple[str, ...]:
    """``IsDNS1123Subdomain``."""
    errs = [max_len(253)] if len(value) > 253 else []
    if not _SUBDOMAIN.fullmatch(value):
        errs.append(regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
    return tuple(errs)


@functools.lru_cache(maxsize=4096)
def qualified_name(value: str) -> tuple[str, ...]:
    """``IsQualifiedName``: label keys, annotation keys, finalizers (``prefix/name``)."""
    parts = value.split("/")
    errs: list[str] = []
    if len(parts) > 2:
        return (
            "a qualified name "
            + regex_error(_QUALIFIED_MSG, _QUALIFIED_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        )
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += [f"prefix part {m}" for m in dns1123_subdomain(prefix)]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append(f"name part {max_len(63)}")
    if not _QUALIFIED.fullmatch(name):
        errs.append(
            "name part "
            + regex_error(_QUALIFIED_MSG, _QUALIFIED_FMT, "MyName", "my.name", "123-abc")
        )
    return tuple(errs)


@functools.lru_cache(maxsize=4096)
def label_value(value: str) -> tuple[str, ...]:
    """``IsValidLabelValue``."""
    errs = [max_len(63)] if len(value) > 63 else []
    if not _LABEL_VALUE.fullmatch(value):
        errs.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return tuple(errs)


def invalid(field: str, value: Any, msg: str) -> Cause:
    return ("FieldValueInvalid", field, f"Invalid value: {go_value(value)}: {msg}")


def invalids(field: str, value: Any, msgs: Iterable[str]) -> list[Cause]:
    return [invalid(field, value, m) for m in msgs]


def required(field: str, detail: str = "") -> Cause:
    return (
        "FieldValueRequired",
        field,
        f"Required value: {detail}" if detail else "Required value",
    )


def duplicate(field: str, value: Any) -> Cause:
    return ("FieldValueDuplicate", field, f"Duplicate value: {go_value(value)}")


def forbidden(field: str, detail: str) -> Cause:
    return ("FieldValueForbidden", field, f"Forbidden: {detail}")


def not_found(field: str, value: Any) -> Cause:
    return ("FieldValueNotFound", field, f"Not found: {go_value(value)}")


def too_long(field: str, limit: int) -> Cause:
    return ("FieldValueTooLong", field, f"Too long: may not be more than {limit} bytes")


def not_supported(field: str, value: Any, supported: Iterable[str]) -> Cause:
    shown = ", ".join(f'"{s}"' for s in supported)
    return (
        "FieldValueNotSupported",
        field,
        f"Unsupported value: {go_value(value)}: supported values: {shown}",
    )
