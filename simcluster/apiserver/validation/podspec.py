"""``ValidatePodSpec``'s rules that a pod writer can trip, as upstream words them.

Containers: at least one; names DNS-1123 labels, unique across containers, init and
ephemeral containers; an image for every (non-ephemeral) container; ``imagePullPolicy`` and
``terminationMessagePolicy`` enums; ports (1-65535, protocol enum, unique names); env var
names; volume mounts naming a declared volume; resources (valid names, quantities ≥ 0,
requests ≤ limits). Pod level: ``restartPolicy``, ``dnsPolicy``, ``activeDeadlineSeconds``,
``serviceAccountName`` and ``nodeName`` formats, volume names, toleration enums.

Quantities were checked for syntax at decode (``validation.decode``), so parsing here
cannot fail.
"""

from __future__ import annotations

import re
from typing import Any

from simcluster.apiserver.validation.fields import (
    Cause,
    dns1123_label,
    dns1123_subdomain,
    duplicate,
    invalid,
    invalids,
    not_found,
    not_supported,
    qualified_name,
    required,
)
from simcluster.quantity import parse_quantity

__all__ = ["pod_spec_causes"]

Obj = dict[str, Any]
_RESTART = ("Always", "OnFailure", "Never")
_PULL = ("Always", "IfNotPresent", "Never")
_DNS = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
_TERMINATION_MSG = ("File", "FallbackToLogsOnError")
_PROTOCOLS = ("SCTP", "TCP", "UDP")
_TOLERATION_OPS = ("Equal", "Exists")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_ENV_NAME = re.compile("[-._a-zA-Z][-._a-zA-Z0-9]*")
_ENV_MSG = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', "
    "'-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  "
    "or 'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"
)
_STANDARD_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "storage", "pods"})
_MAX_INT32 = 2**31 - 1


def _resource_name(name: str, path: str) -> list[Cause]:
    if name in _STANDARD_RESOURCES or name.startswith("hugepages-"):
        return []
    msgs = qualified_name(name)
    if not msgs and "/" not in name:
        msgs = ("must be a standard resource type or fully qualified",)
    return invalids(path, name, msgs)


def _may_be_negative(value: Any) -> bool:
    """False when ``value`` cannot be negative (no minus sign), sparing the exact parse."""
    if isinstance(value, str):
        return "-" in value
    return isinstance(value, int | float) and value < 0


def _resources(res: Any, path: str) -> list[Cause]:
    if not isinstance(res, dict):
        return []
    out: list[Cause] = []
    limits = res.get("limits") or {}
    requests = res.get("requests") or {}
    for part, values in (("limits", limits), ("requests", requests)):
        for name, value in values.items():
            key = f"{path}.{part}[{name}]"
            out += _resource_name(name, key)
            if _may_be_negative(value) and parse_quantity(value) < 0:
                out.append(invalid(key, str(value), "must be greater than or equal to 0"))
    for name, value in requests.items():
        if name not in limits or value == limits[name]:
            continue
        if parse_quantity(value) > parse_quantity(limits[name]):
            out.append(
                invalid(
                    f"{path}.requests[{name}]",
                    str(value),
                    f"must be less than or equal to {name} limit of {limits[name]}",
                )
            )
    return out


def _ports(ports: Any, path: str) -> list[Cause]:
    out: list[Cause] = []
    names: set[str] = set()
    for i, p in enumerate(ports if isinstance(ports, list) else []):
        if not isinstance(p, dict):
            continue
        pp = f"{path}[{i}]"
        port = p.get("containerPort")
        if not isinstance(port, int) or not 1 <= port <= 65535:
            out.append(
                invalid(f"{pp}.containerPort", port, "must be between 1 and 65535, inclusive")
            )
        if p.get("protocol") not in (None, *_PROTOCOLS):
            out.append(not_supported(f"{pp}.protocol", p["protocol"], _PROTOCOLS))
        name = p.get("name")
        if name:
            if name in names:
                out.append(duplicate(f"{pp}.name", name))
            names.add(name)
    return out


def _container(c: Obj, path: str, volumes: set[str], ephemeral: bool) -> list[Cause]:
    out: list[Cause] = []
    if not c.get("image") and not ephemeral:
        out.append(required(f"{path}.image"))
    if c.get("imagePullPolicy") not in (None, *_PULL):
        out.append(not_supported(f"{path}.imagePullPolicy", c["imagePullPolicy"], _PULL))
    policy = c.get("terminationMessagePolicy")
    if policy not in (None, *_TERMINATION_MSG):
        out.append(not_supported(f"{path}.terminationMessagePolicy", policy, _TERMINATION_MSG))
    out += _ports(c.get("ports"), f"{path}.ports")
    for i, env in enumerate(c.get("env") or []):
        name = env.get("name") if isinstance(env, dict) else None
        if not name:
            out.append(required(f"{path}.env[{i}].name"))
        elif not _ENV_NAME.fullmatch(name):
            out.append(invalid(f"{path}.env[{i}].name", name, _ENV_MSG))
    for i, m in enumerate(c.get("volumeMounts") or []):
        name = m.get("name") if isinstance(m, dict) else None
        if not name:
            out.append(required(f"{path}.volumeMounts[{i}].name"))
        elif name not in volumes:
            out.append(not_found(f"{path}.volumeMounts[{i}].name", name))
        if isinstance(m, dict) and not m.get("mountPath"):
            out.append(required(f"{path}.volumeMounts[{i}].mountPath"))
    out += _resources(c.get("resources"), f"{path}.resources")
    return out


def _containers(spec: Obj, volumes: set[str]) -> list[Cause]:
    out: list[Cause] = []
    if not spec.get("containers"):
        out.append(required("spec.containers"))
    seen: set[str] = set()
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for i, c in enumerate(spec.get(key) or []):
            path = f"spec.{key}[{i}]"
            if not isinstance(c, dict):
                out.append(invalid(path, c, "must be an object"))
                continue
            name = c.get("name")
            if not name:
                out.append(required(f"{path}.name"))
            elif not isinstance(name, str):
                out.append(invalid(f"{path}.name", name, "must be a string"))
            else:
                out += invalids(f"{path}.name", name, dns1123_label(name))
                if name in seen:
                    out.append(duplicate(f"{path}.name", name))
                seen.add(name)
            out += _container(c, path, volumes, key == "ephemeralContainers")
    return out


def _volumes(spec: Obj) -> tuple[set[str], list[Cause]]:
    names: set[str] = set()
    out: list[Cause] = []
    for i, v in enumerate(spec.get("volumes") or []):
        name = v.get("name") if isinstance(v, dict) else None
        path = f"spec.volumes[{i}].name"
        if not name or not isinstance(name, str):
            out.append(required(path))
            continue
        out += invalids(path, name, dns1123_label(name))
        if name in names:
            out.append(duplicate(path, name))
        names.add(name)
    return names, out


def _tolerations(spec: Obj) -> list[Cause]:
    out: list[Cause] = []
    for i, t in enumerate(spec.get("tolerations") or []):
        if not isinstance(t, dict):
            continue
        path = f"spec.tolerations[{i}]"
        op = t.get("operator") or "Equal"
        if op not in _TOLERATION_OPS:
            out.append(not_supported(f"{path}.operator", op, _TOLERATION_OPS))
        elif op == "Exists" and t.get("value"):
            out.append(
                invalid(f"{path}.operator", t, "value must be empty when `operator` is 'Exists'")
            )
        if t.get("effect") not in (None, "", *_EFFECTS):
            out.append(not_supported(f"{path}.effect", t["effect"], _EFFECTS))
    return out


def _pod_fields(spec: Obj) -> list[Cause]:
    out: list[Cause] = []
    if spec.get("restartPolicy") not in (None, *_RESTART):
        out.append(not_supported("spec.restartPolicy", spec["restartPolicy"], _RESTART))
    if spec.get("dnsPolicy") not in (None, *_DNS):
        out.append(not_supported("spec.dnsPolicy", spec["dnsPolicy"], _DNS))
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or not 1 <= deadline <= _MAX_INT32):
        out.append(
            invalid(
                "spec.activeDeadlineSeconds",
                deadline,
                f"must be between 1 and {_MAX_INT32}, inclusive",
            )
        )
    for key in ("serviceAccountName", "nodeName"):
        value = spec.get(key)
        if value:
            out += invalids(f"spec.{key}", value, dns1123_subdomain(str(value)))
    return out


def pod_spec_causes(spec: Any) -> list[Cause]:
    """Every cause ``ValidatePodSpec`` finds in a (defaulted) pod spec."""
    if not isinstance(spec, dict):
        return [required("spec.containers")]
    volumes, out = _volumes(spec)
    return out + _containers(spec, volumes) + _pod_fields(spec) + _tolerations(spec)
