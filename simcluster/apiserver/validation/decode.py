"""What upstream refuses while decoding a body into its typed structs: 400 BadRequest, before
any validation runs (``Pod in version "v1" cannot be handled as a Pod: ...``).

simcluster keeps objects as decoded JSON, so a malformed quantity or a number where a string
belongs would otherwise be stored and reach the kubelets and the quota ledger. These checks
walk only the fields whose Go types reject such values: resource quantities (container
resources, pod overhead and resources, emptyDir size limits, quota ``hard``, LimitRange
limits), ConfigMap values (strings; ``binaryData`` base64), Secret ``data`` (base64) and
``stringData`` (strings), and the top-level shapes of RBAC and APF objects.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterator
from typing import Any

from simcluster.errors import BadRequest
from simcluster.quantity import parse_quantity

__all__ = ["check_decodable"]

Obj = dict[str, Any]
#: The everyday spellings ("2", "500m", "1.5", "64Mi"), valid without a full parse: the
#: exact parser costs ~10 µs a value, several times a pod's whole validation otherwise.
_PLAIN_QUANTITY = re.compile(r"[0-9]{1,15}(\.[0-9]{1,9})?(m|k|M|G|T|Ki|Mi|Gi|Ti)?")
_JSON_TYPES = ((bool, "bool"), (str, "string"), (int, "number"), (float, "number"))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    for t, name in _JSON_TYPES:
        if isinstance(value, t):
            return name
    return "array" if isinstance(value, list) else "object"


class _Decode:
    """One body's decode, for one kind: raises the first error, worded as upstream's."""

    def __init__(self, kind: str, version: str) -> None:
        self.kind, self.version = kind, version

    def fail(self, why: str) -> BadRequest:
        return BadRequest(
            f'{self.kind} in version "{self.version}" cannot be handled as a {self.kind}: {why}'
        )

    def mistyped(self, value: Any, field: str, go_type: str) -> BadRequest:
        return self.fail(
            f"json: cannot unmarshal {_json_type(value)} into Go struct field "
            f"{self.kind}.{field} of type {go_type}"
        )

    def resource_list(self, value: Any, field: str) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise self.mistyped(value, field, "v1.ResourceList")
        for quantity in value.values():
            if isinstance(quantity, str) and _PLAIN_QUANTITY.fullmatch(quantity):
                continue
            try:
                parse_quantity(quantity)
            except BadRequest as e:
                raise self.fail(e.message) from e

    def string_map(self, value: Any, field: str, *, base64_values: bool = False) -> None:
        if value is None:
            return
        if not isinstance(value, dict):
            raise self.mistyped(value, field, "map[string]string")
        for item in value.values():
            if not isinstance(item, str):
                go_type = "[]uint8" if base64_values else "string"
                raise self.mistyped(item, field, go_type)
            if base64_values:
                try:
                    base64.b64decode(item, validate=True)
                except (binascii.Error, ValueError) as e:
                    raise self.fail(f"illegal base64 data at input byte {_bad_byte(item)}") from e


def _bad_byte(text: str) -> int:
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    for i, ch in enumerate(text):
        if ch not in alphabet:
            return i
    return len(text) - len(text) % 4


def _dicts(value: Any) -> Iterator[Obj]:
    for item in value if isinstance(value, list) else []:
        if isinstance(item, dict):
            yield item


def _pod_spec(d: _Decode, spec: Any, path: str) -> None:
    if not isinstance(spec, dict):
        return
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for c in _dicts(spec.get(key)):
            res = c.get("resources")
            if isinstance(res, dict):
                for part in ("requests", "limits"):
                    d.resource_list(res.get(part), f"{path}.{key}.resources.{part}")
    d.resource_list(spec.get("overhead"), f"{path}.overhead")
    res = spec.get("resources")
    if isinstance(res, dict):
        for part in ("requests", "limits"):
            d.resource_list(res.get(part), f"{path}.resources.{part}")
    for v in _dicts(spec.get("volumes")):
        empty_dir = v.get("emptyDir")
        if isinstance(empty_dir, dict) and empty_dir.get("sizeLimit") is not None:
            d.resource_list({"sizeLimit": empty_dir["sizeLimit"]}, f"{path}.volumes.emptyDir")


def _limit_range(d: _Decode, obj: Obj) -> None:
    spec = obj.get("spec")
    for item in _dicts(spec.get("limits") if isinstance(spec, dict) else None):
        for part in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
            d.resource_list(item.get(part), f"spec.limits.{part}")


def _quota(d: _Decode, obj: Obj) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        d.resource_list(spec.get("hard"), "spec.hard")


def _configmap(d: _Decode, obj: Obj) -> None:
    d.string_map(obj.get("data"), "data")
    d.string_map(obj.get("binaryData"), "binaryData", base64_values=True)


def _secret(d: _Decode, obj: Obj) -> None:
    d.string_map(obj.get("data"), "data", base64_values=True)
    d.string_map(obj.get("stringData"), "stringData")


def _shapes(**fields: str) -> Callable[[_Decode, Obj], None]:
    """Top-level fields that must be an object (Go type ``v1.X``) or a list of objects
    (``[]v1.X``): RBAC and APF objects, whose rules the authorizer and flow control read on
    every request."""

    def check(d: _Decode, obj: Obj) -> None:
        for field, go_type in fields.items():
            value = obj.get(field)
            if value is None:
                continue
            if not go_type.startswith("[]"):
                if not isinstance(value, dict):
                    raise d.mistyped(value, field, go_type)
                continue
            if not isinstance(value, list):
                raise d.mistyped(value, field, go_type)
            for item in value:
                if not isinstance(item, dict):
                    raise d.mistyped(item, field, go_type[2:])

    return check


_RBAC, _APF = "rbac.authorization.k8s.io", "flowcontrol.apiserver.k8s.io"
_ROLE = _shapes(rules="[]v1.PolicyRule", aggregationRule="v1.AggregationRule")
_BINDING = _shapes(subjects="[]v1.Subject", roleRef="v1.RoleRef")
_BY_KEY: dict[str, Callable[[_Decode, Obj], None]] = {
    f"{_RBAC}/roles": _ROLE,
    f"{_RBAC}/clusterroles": _ROLE,
    f"{_RBAC}/rolebindings": _BINDING,
    f"{_RBAC}/clusterrolebindings": _BINDING,
    f"{_APF}/flowschemas": _shapes(spec="v1.FlowSchemaSpec"),
    f"{_APF}/prioritylevelconfigurations": _shapes(spec="v1.PriorityLevelConfigurationSpec"),
    "/pods": lambda d, obj: _pod_spec(d, obj.get("spec"), "spec"),
    "/resourcequotas": _quota,
    "/limitranges": _limit_range,
    "/configmaps": _configmap,
    "/secrets": _secret,
}


def check_decodable(key: str, kind: str, version: str, obj: Obj) -> None:
    """Raise BadRequest where upstream's decoder would refuse ``obj``, an object of the
    kind stored under ``key`` (``group/plural``)."""
    check = _BY_KEY.get(key)
    if check is not None:
        check(_Decode(kind, version), obj)
