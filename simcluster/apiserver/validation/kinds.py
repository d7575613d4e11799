"""The per-kind rules of the other kinds Sandman and operators write, as upstream's
``Validate<Kind>`` functions word them (metadata is ``objectmeta``'s, quantities' syntax
``decode``'s):

- ConfigMap: keys (``IsConfigMapKey``), no key in both ``data`` and ``binaryData``, 1 MiB
  in total; Secret: the same keys, 1 MiB, ``type`` required on update to stay as it was;
- Lease: ``leaseDurationSeconds`` > 0, ``leaseTransitions`` ≥ 0;
- Event (core/v1): ``involvedObject.namespace`` agrees with the event's namespace;
- ResourceQuota: ``spec.hard`` names and non-negative values;
- RBAC: rules have verbs (and api groups for resource rules), ``roleRef`` kind/apiGroup
  enums and a name, unchanged on update; subjects' kinds;
- APF: a FlowSchema's ``matchingPrecedence`` 1..10000 and its priority level's name; a
  PriorityLevelConfiguration's ``type`` enum.
"""

from __future__ import annotations

import re
from typing import Any

from simcluster.apiserver.validation.fields import (
    Cause,
    duplicate,
    invalid,
    invalids,
    not_supported,
    qualified_name,
    required,
)
from simcluster.quantity import parse_quantity

__all__ = [
    "configmap",
    "event",
    "flow_schema",
    "lease",
    "priority_level",
    "resource_quota",
    "role_binding",
    "role_binding_update",
    "rules",
    "secret",
    "secret_update",
]

Obj = dict[str, Any]
_CONFIG_KEY = re.compile("[-._a-zA-Z0-9]+")
_CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
_DATA_LIMIT = 1024 * 1024
_RBAC = "rbac.authorization.k8s.io"
_SUBJECTS = ("ServiceAccount", "User", "Group")


def _config_keys(data: Any, path: str) -> list[Cause]:
    out: list[Cause] = []
    for key in data or {}:
        if len(key) > 253:
            out.append(invalid(f"{path}[{key}]", key, "must be no more than 253 characters"))
        if not _CONFIG_KEY.fullmatch(key):
            out.append(invalid(f"{path}[{key}]", key, _CONFIG_KEY_MSG))
        elif key in (".", "..") or key.startswith(".."):
            out.append(invalid(f"{path}[{key}]", key, "must not be '.' or '..' or start with '..'"))
    return out


def _size(*maps: Any) -> int:
    return sum(len(k) + len(v) for m in maps for k, v in (m or {}).items())


def configmap(obj: Obj) -> list[Cause]:
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    out = _config_keys(data, "data") + _config_keys(binary, "binaryData")
    out += [duplicate(f"data[{k}]", k) for k in binary if k in data]
    if _size(data, binary) > _DATA_LIMIT:
        out.append(("FieldValueTooLong", "", f"Too long: must have at most {_DATA_LIMIT} bytes"))
    return out


def secret(obj: Obj) -> list[Cause]:
    data = obj.get("data") or {}
    out = _config_keys(data, "data") + _config_keys(obj.get("stringData") or {}, "stringData")
    if sum(len(k) + len(v) * 3 // 4 for k, v in data.items()) > _DATA_LIMIT:
        out.append(
            ("FieldValueTooLong", "data", f"Too long: must have at most {_DATA_LIMIT} bytes")
        )
    return out


def secret_update(new: Obj, old: Obj) -> list[Cause]:
    if (new.get("type") or "Opaque") != (old.get("type") or "Opaque"):
        return [invalid("type", new.get("type") or "", "field is immutable")]
    if old.get("immutable") and (new.get("data") != old.get("data")):
        return [
            ("FieldValueForbidden", "data", "Forbidden: field is immutable when `immutable` is set")
        ]
    return []


def lease(obj: Obj) -> list[Cause]:
    spec = obj.get("spec") or {}
    out: list[Cause] = []
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        out.append(invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
        out.append(
            invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
        )
    return out


def event(obj: Obj) -> list[Cause]:
    if obj.get("eventTime"):
        return []
    namespace = obj["metadata"].get("namespace", "")
    involved = str((obj.get("involvedObject") or {}).get("namespace") or "")
    if (involved and involved != namespace) or (not involved and namespace not in ("", "default")):
        return [invalid("involvedObject.namespace", involved, "does not match event.namespace")]
    return []


def resource_quota(obj: Obj) -> list[Cause]:
    out: list[Cause] = []
    for name, value in ((obj.get("spec") or {}).get("hard") or {}).items():
        path = f"spec.hard[{name}]"
        out += invalids(path, name, qualified_name(name))
        if ("-" in value if isinstance(value, str) else True) and parse_quantity(value) < 0:
            out.append(invalid(path, str(value), "must be greater than or equal to 0"))
    return out


def rules(obj: Obj) -> list[Cause]:
    out: list[Cause] = []
    for i, rule in enumerate(obj.get("rules") or []):
        if not isinstance(rule, dict):
            continue
        if not rule.get("verbs"):
            out.append(required(f"rules[{i}].verbs", "verbs must contain at least one value"))
        if rule.get("nonResourceURLs"):
            if rule.get("resources") or rule.get("apiGroups"):
                out.append(
                    invalid(
                        f"rules[{i}].nonResourceURLs",
                        rule["nonResourceURLs"],
                        "rules cannot apply to both regular resources and non-resource URLs",
                    )
                )
        elif not rule.get("apiGroups"):
            out.append(
                required(
                    f"rules[{i}].apiGroups", "resource rules must supply at least one api group"
                )
            )
    return out


def role_binding(obj: Obj) -> list[Cause]:
    ref = obj.get("roleRef")
    ref = ref if isinstance(ref, dict) else {}  # a list here was an AttributeError: a 500
    out: list[Cause] = []
    kinds = ("Role", "ClusterRole") if obj.get("kind") == "RoleBinding" else ("ClusterRole",)
    if ref.get("apiGroup") != _RBAC:
        out.append(not_supported("roleRef.apiGroup", ref.get("apiGroup") or "", (_RBAC,)))
    if ref.get("kind") not in kinds:
        out.append(not_supported("roleRef.kind", ref.get("kind") or "", kinds))
    if not ref.get("name"):
        out.append(required("roleRef.name"))
    for i, s in enumerate(obj.get("subjects") or []):
        if not isinstance(s, dict):
            continue
        if s.get("kind") not in _SUBJECTS:
            out.append(not_supported(f"subjects[{i}].kind", s.get("kind") or "", _SUBJECTS))
        if not s.get("name"):
            out.append(required(f"subjects[{i}].name"))
    return out


def role_binding_update(new: Obj, old: Obj) -> list[Cause]:
    if new.get("roleRef") != old.get("roleRef"):
        return [invalid("roleRef", new.get("roleRef"), "cannot change roleRef")]
    return []


def flow_schema(obj: Obj) -> list[Cause]:
    spec = obj.get("spec") or {}
    out: list[Cause] = []
    precedence = spec.get("matchingPrecedence")
    if precedence is not None and (not isinstance(precedence, int) or not 1 <= precedence <= 10000):
        out.append(
            invalid("spec.matchingPrecedence", precedence, "must be between 1 and 10000, inclusive")
        )
    ref = spec.get("priorityLevelConfiguration")
    if not (ref.get("name") if isinstance(ref, dict) else None):
        out.append(
            required("spec.priorityLevelConfiguration.name", "must reference a priority level")
        )
    return out


def priority_level(obj: Obj) -> list[Cause]:
    kind = (obj.get("spec") or {}).get("type")
    if kind not in ("Exempt", "Limited"):
        return [not_supported("spec.type", kind or "", ("Exempt", "Limited"))]
    return []
