"""Decoding the Kubernetes protobuf request bodies kubectl's typed clients send.

``kubectl create namespace|configmap|secret|serviceaccount|token`` and ``kubectl auth
whoami|can-i`` send ``application/vnd.kubernetes.protobuf`` bodies. This decoder knows the
envelope (``k8s\\0`` + runtime.Unknown) and the field numbers of those few kinds (from
upstream's generated.proto); any other kind is refused with 415 and a pointer to
``kubectl apply -f``. Responses are always JSON, which the clients accept.
"""

from __future__ import annotations

import base64
from typing import Any

from simcluster.errors import BadRequest, UnsupportedMediaType

__all__ = ["decode_k8s_protobuf"]

Obj = dict[str, Any]
MAGIC = b"k8s\x00"

# A schema maps field number -> (json name, kind); kind is "str", "bytes", "int", "bool",
# "strlist", "map" (string -> string), "bmap" (string -> base64 bytes) or a nested schema.
Schema = dict[int, tuple[str, Any]]
_META: Schema = {
    1: ("name", "str"),
    2: ("generateName", "str"),
    3: ("namespace", "str"),
    11: ("labels", "map"),
    12: ("annotations", "map"),
    14: ("finalizers", "strlist"),
}
_REF: Schema = {1: ("name", "str")}
_ATTRS: Schema = {
    1: ("namespace", "str"), 2: ("verb", "str"), 3: ("group", "str"), 4: ("version", "str"),
    5: ("resource", "str"), 6: ("subresource", "str"), 7: ("name", "str"),
}  # fmt: skip
_KINDS: dict[str, Schema] = {
    "Namespace": {1: ("metadata", _META), 2: ("spec", {1: ("finalizers", "strlist")})},
    "ConfigMap": {
        1: ("metadata", _META),
        2: ("data", "map"),
        3: ("immutable", "bool"),
        4: ("binaryData", "bmap"),
    },
    "Secret": {
        1: ("metadata", _META),
        2: ("data", "bmap"),
        3: ("type", "str"),
        4: ("stringData", "map"),
        5: ("immutable", "bool"),
    },
    "ServiceAccount": {
        1: ("metadata", _META),
        2: ("secrets", [_REF]),
        3: ("imagePullSecrets", [_REF]),
        4: ("automountServiceAccountToken", "bool"),
    },
    "TokenRequest": {
        1: ("metadata", _META),
        2: ("spec", {1: ("audiences", "strlist"), 4: ("expirationSeconds", "int")}),
    },
    "SelfSubjectReview": {1: ("metadata", _META)},
    "SelfSubjectRulesReview": {1: ("metadata", _META), 2: ("spec", {1: ("namespace", "str")})},
    "SelfSubjectAccessReview": {
        1: ("metadata", _META),
        2: (
            "spec",
            {
                1: ("resourceAttributes", _ATTRS),
                2: ("nonResourceAttributes", {1: ("path", "str"), 2: ("verb", "str")}),
            },
        ),
    },
}


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf):
            raise BadRequest("truncated protobuf body")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) triples; length-delimited values stay bytes."""
    out: list[tuple[int, int, Any]] = []
    i = 0
    while i < len(buf):
        value: Any
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise BadRequest(f"unsupported protobuf wire type {wire}")
        out.append((num, wire, value))
    return out


def _message(buf: bytes, schema: Schema) -> Obj:
    obj: Obj = {}
    for num, _, value in _fields(buf):
        if num not in schema:
            continue
        name, kind = schema[num]
        if kind == "str":
            obj[name] = value.decode()
        elif kind == "int":
            obj[name] = int(value)
        elif kind == "bool":
            obj[name] = bool(value)
        elif kind == "strlist":
            obj.setdefault(name, []).append(value.decode())
        elif kind in ("map", "bmap"):
            entry = {n: v for n, _, v in _fields(value)}
            raw = entry.get(2, b"")
            v = base64.b64encode(raw).decode() if kind == "bmap" else raw.decode()
            obj.setdefault(name, {})[entry.get(1, b"").decode()] = v
        elif isinstance(kind, list):
            obj.setdefault(name, []).append(_message(value, kind[0]))
        else:
            obj[name] = _message(value, kind)
    return obj


def decode_k8s_protobuf(body: bytes) -> Obj:
    if not body.startswith(MAGIC):
        raise BadRequest("protobuf body without the k8s envelope")
    envelope = {n: v for n, _, v in _fields(body[len(MAGIC) :])}
    type_meta = {n: v for n, _, v in _fields(envelope.get(1, b""))}
    api_version, kind = type_meta.get(1, b"").decode(), type_meta.get(2, b"").decode()
    schema = _KINDS.get(kind)
    if schema is None:
        raise UnsupportedMediaType(
            f"simcluster decodes protobuf bodies only for {', '.join(sorted(_KINDS))}, not {kind}: "
            "send JSON (e.g. `kubectl apply -f` or `kubectl create -f` with a manifest)"
        )
    obj = _message(envelope.get(2, b""), schema)
    obj["apiVersion"], obj["kind"] = api_version, kind
    return obj
