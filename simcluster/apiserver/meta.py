"""Object metadata helpers shared by the core and the kind-specific strategies."""

from __future__ import annotations

import datetime as dt
import re
import secrets
import uuid
from typing import Any

from simcluster.errors import Invalid

__all__ = ["generate_name", "new_uid", "now", "rfc3339", "validate_name"]

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ALNUM = "bcdfghjklmnpqrstvwxz2456789"  # upstream's utilrand alphabet (no vowels, no 0/1/3)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def rfc3339(t: dt.datetime | None = None) -> str:
    return (t or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_uid() -> str:
    return str(uuid.uuid4())


def generate_name(prefix: str) -> str:
    return prefix[:58] + "".join(secrets.choice(_ALNUM) for _ in range(5))


def validate_name(kind: str, group: str, name: str, *, dns_label: bool) -> None:
    if dns_label:
        ok, what = bool(_LABEL.match(name)) and len(name) <= 63, "RFC 1123 label"
        example = "'my-name',  or '123-abc'"
        regex = _LABEL.pattern[1:-1]
    else:
        ok, what = bool(_SUBDOMAIN.match(name)) and len(name) <= 253, "RFC 1123 subdomain"
        example = "'example.com'"
        regex = _SUBDOMAIN.pattern[1:-1]
    if not ok:
        msg = (
            f'Invalid value: "{name}": a lowercase {what} must consist of lower case alphanumeric '
            f"characters, '-' or '.', and must start and end with an alphanumeric character "
            f"(e.g. {example}, regex used for validation is '{regex}')"
        )
        raise Invalid.for_object(kind, group, name, [("FieldValueInvalid", "metadata.name", msg)])


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    return obj.get("metadata", {}).get("labels") or {}
