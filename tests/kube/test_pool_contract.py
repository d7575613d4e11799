"""The pool contract (kube/pool_contract.py) held to its CRD manifest
(manifests/crds/sandboxclaims.yaml): the names the clients address and a schema that admits
exactly the spec the wire model writes; pool pod names are valid and stable per slot."""

from __future__ import annotations

import re
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from devstack.crds import sandbox_claim_crd, sandman_crds
from kube.pool_contract import (
    MAX_CLAIM,
    SANDBOX_CLAIMS,
    ClaimSpec,
    claim_name,
    pool_pod_name,
)

DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"


def _version(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == SANDBOX_CLAIMS.version]
    return version


def test_the_manifest_names_the_resource_the_clients_address() -> None:
    crd = sandbox_claim_crd()
    spec, names = crd["spec"], crd["spec"]["names"]
    assert crd["metadata"]["name"] == f"{SANDBOX_CLAIMS.plural}.{SANDBOX_CLAIMS.group}"
    assert (spec["group"], names["plural"], names["kind"]) == (
        SANDBOX_CLAIMS.group,
        SANDBOX_CLAIMS.plural,
        SANDBOX_CLAIMS.kind,
    )
    assert spec["scope"] == "Namespaced"
    assert crd in sandman_crds()


def test_the_schema_admits_exactly_the_spec_the_wire_model_writes() -> None:
    schema = _version(sandbox_claim_crd())["schema"]["openAPIV3Schema"]["properties"]["spec"]
    info = msgspec.inspect.type_info(ClaimSpec)
    assert isinstance(info, msgspec.inspect.StructType)
    assert set(schema["properties"]) == {f.encode_name for f in info.fields}
    assert set(schema["required"]) == {f.encode_name for f in info.fields if f.required}
    assert schema["properties"]["pods"]["maxItems"] == MAX_CLAIM
    full = ClaimSpec(
        pool="prep-1",
        image="python:3.12",
        sandbox_class="small",
        pods=["a"],
        request_digest="d",
        owner="o",
        labels={"k": "v"},
        expires_at="2026-01-01T00:00:00Z",
        idle_timeout_s=60.0,
    )
    assert set(msgspec.to_builtins(full)) == set(schema["properties"])


@given(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-.", min_size=1, max_size=253),
    st.integers(0, 10_000),
    st.integers(0, 100_000),
)
def test_pool_pod_names_are_stable_valid_labels(announcement: str, image: int, slot: int) -> None:
    name = pool_pod_name(announcement, image, slot)
    assert len(name) <= 63 and re.fullmatch(DNS_LABEL, name), name
    assert name == pool_pod_name(announcement, image, slot)
    assert name.endswith(f"-p{image}-{slot}")


def test_distinct_slots_and_keys_get_distinct_names() -> None:
    names = {pool_pod_name("prep-abc", i, s) for i in range(20) for s in range(50)}
    assert len(names) == 1000
    assert claim_name("key-1") != claim_name("key-2")
    assert claim_name("key-1") == claim_name("key-1")
    assert len(claim_name("k")) <= 63
