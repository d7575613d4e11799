"""The ImagePreparation CRD: the manifest is the code's definition, and simcluster serves it
with a status subresource (what the controller writes progress through)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kube.preparation import CRD, encode_images, lease_name

ROOT = Path(__file__).resolve().parents[2]


def test_the_manifest_is_the_codes_definition() -> None:
    manifest = yaml.safe_load((ROOT / "manifests/crds/imagepreparations.yaml").read_text())
    assert manifest == CRD


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
