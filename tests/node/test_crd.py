"""The ImagePreparation CRD: the manifest (manifests/crds/imagepreparations.yaml) is its one
definition; these tests hold what the code expects of it to that file — the names the
clients address, the status subresource the controller writes progress through, and a
schema that admits exactly the spec the wire model writes and any status the controller
reports."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import yaml

from devstack.crds import image_preparation_crd
from kube.preparation_contract import IMAGE_PREPARATIONS, encode_images, lease_name
from sandman.wire.image_preparation import ImageRequest, PreparationSpec, StandingPool


def _version(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == IMAGE_PREPARATIONS.version]
    return version


def _fields(model: type[msgspec.Struct]) -> tuple[set[str], set[str]]:
    """A Struct's encoded field names, and those without a default (required)."""
    info = msgspec.inspect.type_info(model)
    assert isinstance(info, msgspec.inspect.StructType)
    return {f.encode_name for f in info.fields}, {f.encode_name for f in info.fields if f.required}


def test_the_manifest_names_the_resource_the_clients_address() -> None:
    crd = image_preparation_crd()
    spec, names = crd["spec"], crd["spec"]["names"]
    assert crd["metadata"]["name"] == f"{IMAGE_PREPARATIONS.plural}.{IMAGE_PREPARATIONS.group}"
    assert spec["group"] == IMAGE_PREPARATIONS.group
    assert (names["plural"], names["kind"]) == (IMAGE_PREPARATIONS.plural, IMAGE_PREPARATIONS.kind)
    assert spec["scope"] == ("Namespaced" if IMAGE_PREPARATIONS.namespaced else "Cluster")
    version = _version(crd)
    assert version["served"] and version["storage"]
    # The controller patches progress through .../status (controller/image_preparer.py).
    assert version["subresources"] == {"status": {}}


def test_the_schema_admits_the_spec_the_wire_model_writes_and_any_status() -> None:
    schema = _version(image_preparation_crd())["schema"]["openAPIV3Schema"]["properties"]
    spec, status = schema["spec"], schema["status"]
    fields, required = _fields(PreparationSpec)
    assert set(spec["properties"]) == fields and set(spec["required"]) == required
    image = spec["properties"]["images"]["items"]
    fields, required = _fields(ImageRequest)
    assert set(image["properties"]) == fields and set(image["required"]) == required
    standing = spec["properties"]["standing"]
    fields, required = _fields(StandingPool)
    assert set(standing["properties"]) == fields and set(standing["required"]) == required
    # The status is PreparationStatus, written by the controller alone, whole: kept as is.
    assert status == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def test_lease_names_are_valid_object_names_even_for_long_node_names() -> None:
    assert lease_name("node-3") == "sandman-node-node-3"
    long = lease_name("n" * 250)
    assert len(long) <= 253 and long.startswith("sandman-node-")
    assert lease_name("n" * 250) == long  # stable


@pytest.mark.parametrize("n", [10, 5000])
def test_the_ready_list_fits_its_budget_and_keeps_planned_images_first(n: int) -> None:
    """Hundreds of per-task images fit; beyond the budget the planned ones are kept and the
    rest counted."""
    images = [f"registry.example.com/swe-bench/task-{i:05d}:v1" for i in range(n)]
    planned = set(images[-3:])
    text, left_out = encode_images(images, 128 * 1024, planned)
    assert len(text.encode()) <= 128 * 1024
    assert planned <= set(yaml.safe_load(text))
    assert (left_out == 0) == (n == 10)
