"""Sandbox classes for the burst (``--classes FILE``) and the census of where they landed.

Why: on a cluster of several node pools (simcluster's ``mixed`` profile) the question is not
only "all Ready, how fast" but "did every sandbox land where its class allows": a class
without the taint's toleration must never reach the tainted pool, a class with a node
selector only the pool it selects. The census answers from the pods themselves (their
``spec.nodeSelector``/``tolerations`` against their node's labels and taints, read from the
API after the burst), with rules written out here rather than borrowed from the scheduler
under test.

The file is a YAML list of facade class entries (facade/config.py) with one more key,
``share`` (a positive integer, default 1): request *k* of the burst asks for the class at
position *k* of a smooth weighted round-robin over the shares, so shares 4:1 send every
fifth request (a batch of 100 sandboxes) to the second class.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kube import NODES, PODS, KubeClient
from kube.contract import LABEL_CLASS
from simcluster.pools import POOL_LABEL

__all__ = [
    "POOL_LABEL",
    "BurstClass",
    "ClassesError",
    "Placement",
    "census",
    "class_sequence",
    "load_classes",
    "placement_allowed",
]


class ClassesError(ValueError):
    """A classes file the burst cannot use."""


@dataclass(frozen=True, slots=True)
class BurstClass:
    entry: Mapping[str, Any]  # the facade's class entry, as written (without ``share``)
    share: int = 1

    @property
    def name(self) -> str:
        return str(self.entry["name"])


def load_classes(path: Path) -> tuple[BurstClass, ...]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ClassesError(f"{path}: {e}") from e
    if not isinstance(data, list) or not data:
        raise ClassesError(f"{path}: a non-empty list of class entries is needed")
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not item.get("name"):
            raise ClassesError(f"{path}: entry {i} needs a name")
        entry = {k: v for k, v in item.items() if k != "share"}
        share = item.get("share", 1)
        if not isinstance(share, int) or isinstance(share, bool) or share < 1:
            raise ClassesError(f"{path}: {entry['name']}: share must be a positive integer")
        out.append(BurstClass(entry, share))
    if len({c.name for c in out}) != len(out):
        raise ClassesError(f"{path}: duplicate class names")
    return tuple(out)


def class_sequence(classes: Sequence[BurstClass]) -> tuple[str, ...]:
    """One cycle of smooth weighted round-robin (nginx's): each class appears ``share``
    times, spread out rather than in runs."""
    total = sum(c.share for c in classes)
    current = [0] * len(classes)
    out = []
    for _ in range(total):
        for i, c in enumerate(classes):
            current[i] += c.share
        best = max(range(len(classes)), key=lambda i: current[i])
        current[best] -= total
        out.append(classes[best].name)
    return tuple(out)


def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint``."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("key") and t.get("key") != taint.get("key"):
            continue
        op = t.get("operator") or "Equal"
        if op == "Exists" or (op == "Equal" and t.get("value", "") == taint.get("value", "")):
            return True
    return False


def placement_allowed(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """The pod's nodeSelector matches the node's labels and it tolerates every NoSchedule
    and NoExecute taint of the node (what a class can ask for: facade/podspec.py)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    selector = pod_spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    tolerations = pod_spec.get("tolerations") or []
    taints = (node.get("spec") or {}).get("taints") or []
    return all(
        _tolerates(tolerations, t) for t in taints if t.get("effect") in ("NoSchedule", "NoExecute")
    )


@dataclass(slots=True)
class Placement:
    """Sandbox pods per (class, pool), and those on a node their class does not allow."""

    by_class_pool: Counter[tuple[str, str]] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)  # "pod on node"
    unbound: int = 0

    def markdown(self) -> str:
        pools = sorted({p for _, p in self.by_class_pool})
        classes = sorted({c for c, _ in self.by_class_pool})
        rows = [
            "| class | " + " | ".join(pools) + " |",
            "|---|" + "---:|" * len(pools),
            *(
                f"| {c} | " + " | ".join(f"{self.by_class_pool[c, p]:,}" for p in pools) + " |"
                for c in classes
            ),
        ]
        return "\n".join(rows)


async def census(client: KubeClient, namespace: str, label_selector: str) -> Placement:
    """Where the selected sandbox pods are bound, from the API (one list of each)."""
    nodes = {n["metadata"]["name"]: n for n in (await client.list(NODES))["items"]}
    pods = await client.list(PODS, namespace, label_selector=label_selector)
    out = Placement()
    for pod in pods["items"]:
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        node = nodes.get(spec.get("nodeName") or "")
        if node is None:
            out.unbound += 1
            continue
        labels = node["metadata"].get("labels") or {}
        cls = (meta.get("labels") or {}).get(LABEL_CLASS, "?")
        out.by_class_pool[cls, labels.get(POOL_LABEL, "-")] += 1
        if not placement_allowed(spec, node):
            out.violations.append(f"{meta['name']} on {node['metadata']['name']}")
    return out
