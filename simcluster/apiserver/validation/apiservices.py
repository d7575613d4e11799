"""APIService (apiregistration.k8s.io/v1) rules, as upstream's ``ValidateAPIService`` and
``ValidateAPIServiceStatus`` word them.

An APIService's name is its group version (``v1.apps``, ``v1.`` for the core group), so the
name rule needs the spec; the priorities order discovery and must lie in their ranges; a
local APIService (no ``spec.service``) may not carry TLS settings for a backend it lacks.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from simcluster.apiserver.validation.fields import (
    Cause,
    dns1035_label,
    dns1123_subdomain,
    invalid,
    invalids,
    not_supported,
    required,
)

__all__ = ["api_service", "api_service_status", "required_name"]

Obj = dict[str, Any]

#: (field, upper bound, message) of the two priorities; both must be positive
_PRIORITIES = (
    ("groupPriorityMinimum", 20000, "must be positive and less than 20000"),
    ("versionPriority", 1000, "must be positive and less than 1000"),
)


def required_name(spec: Obj) -> str:
    """The only name an APIService of ``spec`` may have: ``version.group``."""
    return f"{spec.get('version') or ''}.{spec.get('group') or ''}"


def api_service(obj: Obj) -> list[Cause]:
    spec = obj.get("spec") or {}
    group, version = spec.get("group") or "", spec.get("version") or ""
    causes: list[Cause] = []
    name, wanted = obj["metadata"]["name"], required_name(spec)
    if name != wanted:
        msg = f'must be `spec.version+"."+spec.group`: "{wanted}"'
        causes.append(invalid("metadata.name", name, msg))
    if not group and version != "v1":
        detail = "only v1 may have an empty group and it better be legacy kube"
        causes.append(required("spec.group", detail))
    if group:
        causes += invalids("spec.group", group, dns1123_subdomain(group))
    causes += invalids("spec.version", version, dns1035_label(version))
    for key, most, msg in _PRIORITIES:
        value = spec.get(key) or 0
        if not isinstance(value, int) or not 0 < value <= most:
            causes.append(invalid(f"spec.{key}", value, msg))
    return causes + _backend(spec)


def _ca_bytes(spec: Obj) -> int:
    try:
        return len(base64.b64decode(spec.get("caBundle") or "", validate=True))
    except (binascii.Error, ValueError):
        return len(str(spec.get("caBundle")))


def _backend(spec: Obj) -> list[Cause]:
    """The TLS and service rules: a local APIService has no backend to trust."""
    service, skip, ca = (
        spec.get("service"),
        bool(spec.get("insecureSkipTLSVerify")),
        _ca_bytes(spec),
    )
    causes: list[Cause] = []
    if service is None:
        if ca:
            causes.append(
                invalid("spec.caBundle", f"{ca} bytes", "local APIServices may not have a caBundle")
            )
        if skip:
            msg = "local APIServices may not have insecureSkipTLSVerify"
            causes.append(invalid("spec.insecureSkipTLSVerify", True, msg))
        return causes
    for key in ("namespace", "name"):
        if not service.get(key):
            causes.append(required(f"spec.service.{key}"))
    if skip and ca:
        msg = "may not be true if caBundle is present"
        causes.append(invalid("spec.insecureSkipTLSVerify", True, msg))
    return causes


def api_service_status(obj: Obj) -> list[Cause]:
    """A status write: each condition's status is True, False or Unknown."""
    causes: list[Cause] = []
    for i, cond in enumerate((obj.get("status") or {}).get("conditions") or []):
        value = cond.get("status")
        if value not in ("True", "False", "Unknown"):
            field = f"status.conditions[{i}].status"
            causes.append(not_supported(field, value, ("True", "False", "Unknown")))
    return causes
