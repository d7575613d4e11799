"""The CustomResourceDefinitions the local stack installs, read from the operator manifests.

``manifests/crds/`` is the one definition of Sandman's CRDs: an operator applies it, the
``--manifests`` mode applies it with the rest of the overlay, and the default stack installs
the same objects from it (:func:`sandman_crds`), as do the tests that need a cluster
serving the kind. No copy lives in the server packages: the controller and the facade only
use the resources (``kube.preparation_contract.IMAGE_PREPARATIONS``,
``kube.pool_contract.SANDBOX_CLAIMS``), whose names
tests/node/test_crd.py holds to the manifest. The devstack runs from a checkout
(``devstack/manifests.py``), so the folder is there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "CRDS",
    "IMAGE_PREPARATIONS_CRD",
    "SANDBOX_CLAIMS_CRD",
    "image_preparation_crd",
    "sandbox_claim_crd",
    "sandman_crds",
]

#: The repository's ``manifests/crds``.
CRDS = Path(__file__).resolve().parents[1] / "manifests" / "crds"
IMAGE_PREPARATIONS_CRD = CRDS / "imagepreparations.yaml"
SANDBOX_CLAIMS_CRD = CRDS / "sandboxclaims.yaml"


def image_preparation_crd() -> dict[str, Any]:
    """The ``ImagePreparation`` CustomResourceDefinition, as the manifest writes it."""
    crd: dict[str, Any] = yaml.safe_load(IMAGE_PREPARATIONS_CRD.read_text())
    return crd


def sandbox_claim_crd() -> dict[str, Any]:
    """The ``SandboxClaim`` CustomResourceDefinition (pools: one object per claimed batch)."""
    crd: dict[str, Any] = yaml.safe_load(SANDBOX_CLAIMS_CRD.read_text())
    return crd


def sandman_crds() -> list[dict[str, Any]]:
    """Every CRD of ``manifests/crds``, in the order the kustomization lists them."""
    return [image_preparation_crd(), sandbox_claim_crd()]
