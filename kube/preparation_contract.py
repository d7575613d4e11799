"""The image-preparation contract's names and encodings: one definition for the node agent
(which writes what is ready on its node) and the controller (which writes what each node
should prepare). docs/node-agent.md explains the choices; this module holds them.

**The per-node object** is a ``coordination.k8s.io/v1`` Lease in its own namespace
(:data:`AGENT_LEASE_NAMESPACE`, ``sandman-nodes``), ``sandman-node-<node>``, labelled
``sandman.io/node-agent: "true"``. The agent holds it (``spec.holderIdentity`` = the node,
renewed every ``renew_interval_s``), so it doubles as the agent's liveness: the controller
plans only on nodes whose agent Lease is fresh. Each writer owns its own annotations and
writes them with a merge patch (no read-modify-write, no conflicts between the two):

- ``sandman.io/images-ready`` (agent): the images present on the node as CRI ``ListImages``
  reports them — whoever pulled them — normalised, sorted, a JSON array;
- ``sandman.io/images-failed`` (agent): image -> ``{"reason", "message"}`` of its last
  failed pull, at most :data:`MAX_FAILED` entries;
- ``sandman.io/images-truncated`` (agent): how many ready images did not fit the budget;
- ``sandman.io/prepare`` (controller): the images this node should hold, a sorted JSON
  array; the agent pulls what is missing and removes what it pulled that is no longer listed;
- ``sandman.io/bundle`` (agent, hostPath delivery only): the digest of the daemon bundle it
  keeps in the node's hostPath directory.

**Why a namespace of their own.** Every agent must create and patch Leases, and RBAC cannot
scope ``create`` to a name (nor ``patch`` to names derived from node names at run time): in
``sandman-system`` that grant would reach the controller's election Lease, whose
``placement-url`` annotation the facade trusts, so one compromised node could steer every
tenant's pods. In ``sandman-nodes`` the same grant reaches only other agents' Leases (a
node's ready set: a locality preference, never a correctness condition).

**Size.** All annotations of an object share one 256 KiB limit. A normalised reference of a
per-task image is ~50-80 bytes (``registry.example.com/swe/django-12345:v1``), ~70 with JSON
quoting: the ready list's budget (:data:`READY_BUDGET`, 128 KiB) holds ~1,800 of them and
the plan's (:data:`PREPARE_BUDGET`, 96 KiB) ~1,400; a node's disk holds far fewer 1 GiB
images than either. Beyond a budget, the encoder keeps the images the controller asked for
first, then the rest in sorted order, and counts what it left out (the controller then falls
back to ``node.status.images`` for those; locality is a preference, never a correctness
condition).

**The request kind** is the ``ImagePreparation`` custom resource
(:data:`IMAGE_PREPARATIONS`, ``sandman.io/v1alpha1``), ``spec`` and ``status`` as in
:mod:`sandman.wire.image_preparation`. Its CustomResourceDefinition is the manifest
``manifests/crds/imagepreparations.yaml``, the one definition (an operator applies it; the
processes only use the resource), held to these names and to the wire models by
tests/node/test_crd.py.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Final

import msgspec

from kube.resources import Resource

__all__ = [
    "AGENT_LEASE_NAMESPACE",
    "ANNOTATION_BUNDLE",
    "ANNOTATION_FAILED",
    "ANNOTATION_PREPARE",
    "ANNOTATION_READY",
    "ANNOTATION_TRUNCATED",
    "FAILED_BUDGET",
    "IMAGE_PREPARATIONS",
    "LABEL_NODE_AGENT",
    "MAX_FAILED",
    "PREPARE_BUDGET",
    "READY_BUDGET",
    "decode_failed",
    "decode_images",
    "encode_failed",
    "encode_images",
    "lease_name",
]

GROUP: Final = "sandman.io"
VERSION: Final = "v1alpha1"
IMAGE_PREPARATIONS = Resource(GROUP, VERSION, "imagepreparations", "ImagePreparation")

#: Where the per-node Leases live: apart from ``sandman-system`` and its election Lease.
AGENT_LEASE_NAMESPACE: Final = "sandman-nodes"
LABEL_NODE_AGENT: Final = "sandman.io/node-agent"
ANNOTATION_READY: Final = "sandman.io/images-ready"
ANNOTATION_FAILED: Final = "sandman.io/images-failed"
ANNOTATION_TRUNCATED: Final = "sandman.io/images-truncated"
ANNOTATION_PREPARE: Final = "sandman.io/prepare"
ANNOTATION_BUNDLE: Final = "sandman.io/bundle"

READY_BUDGET: Final = 128 * 1024
PREPARE_BUDGET: Final = 96 * 1024
FAILED_BUDGET: Final = 16 * 1024
MAX_FAILED: Final = 50
_MESSAGE_MAX = 200

_LEASE_PREFIX = "sandman-node-"
_NAME_OK = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def lease_name(node: str) -> str:
    """``sandman-node-<node>``; a node name that would make it too long (or is no valid
    object name) gets a stable hash instead."""
    name = _LEASE_PREFIX + node
    if len(name) <= 253 and _NAME_OK.fullmatch(name):
        return name
    digest = hashlib.sha256(node.encode()).hexdigest()[:16]
    return f"{_LEASE_PREFIX}{node[:200].lower().strip('-.')}-{digest}".replace("..", ".")


def encode_images(
    images: Iterable[str], budget: int, first: Collection[str] = ()
) -> tuple[str, int]:
    """A sorted JSON array within ``budget`` bytes and the number of images left out.

    Deterministic: the same set gives the same string (so an unchanged set is never written
    again). Over budget, images in ``first`` are kept before the others."""
    ordered = sorted(set(images), key=lambda i: (i not in first, i))
    kept: list[str] = []
    size = 2
    for image in ordered:
        cost = len(msgspec.json.encode(image)) + 1
        if size + cost > budget:
            break
        kept.append(image)
        size += cost
    return msgspec.json.encode(sorted(kept)).decode(), len(ordered) - len(kept)


def decode_images(value: str | None) -> frozenset[str]:
    """The set an annotation holds; a malformed value reads as empty (never a crash)."""
    if not value:
        return frozenset()
    try:
        items = msgspec.json.decode(value)
    except msgspec.DecodeError:
        return frozenset()
    if not isinstance(items, list):
        return frozenset()
    return frozenset(i for i in items if isinstance(i, str) and i)


def encode_failed(failed: Mapping[str, tuple[str, str]]) -> str:
    """image -> (reason, message) as a JSON object: at most :data:`MAX_FAILED` images (sorted),
    messages cut to 200 characters, within :data:`FAILED_BUDGET`."""
    out: dict[str, dict[str, str]] = {}
    size = 2
    for image in sorted(failed)[:MAX_FAILED]:
        reason, message = failed[image]
        entry = {"reason": reason[:64], "message": message[:_MESSAGE_MAX]}
        cost = len(msgspec.json.encode({image: entry}))
        if size + cost > FAILED_BUDGET:
            break
        out[image] = entry
        size += cost
    return msgspec.json.encode(out).decode()


def decode_failed(value: str | None) -> dict[str, tuple[str, str]]:
    if not value:
        return {}
    try:
        raw = msgspec.json.decode(value)
    except msgspec.DecodeError:
        return {}
    if not isinstance(raw, dict):
        return {}
    out = {}
    for image, entry in raw.items():
        if isinstance(entry, dict):
            out[str(image)] = (str(entry.get("reason", "")), str(entry.get("message", "")))
    return out
