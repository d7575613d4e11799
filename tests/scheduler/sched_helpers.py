"""Builders of Kubernetes Node/Pod JSON for the scheduler tests (plain dicts, like the API)."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]


def node_json(
    name: str,
    cpu: str = "16",
    memory: str = "64Gi",
    pods: str = "110",
    *,
    labels: dict[str, str] | None = None,
    taints: list[Json] | None = None,
    unschedulable: bool = False,
    conditions: dict[str, str] | None = None,
    images: list[str] | None = None,
    storage: str | None = None,
    extended: dict[str, str] | None = None,
) -> Json:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods}
    if storage is not None:
        allocatable["ephemeral-storage"] = storage
    allocatable.update(extended or {})
    conds = {"Ready": "True"} if conditions is None else conditions
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{"type": t, "status": s} for t, s in conds.items()],
            "images": [{"names": [i], "sizeBytes": 1000} for i in images or []],
        },
    }


def pod_json(
    uid: str,
    cpu: str | None = "250m",
    memory: str | None = "512Mi",
    *,
    node: str | None = None,
    phase: str = "Pending",
    image: str = "registry.local/task:1",
    tolerations: list[Json] | None = None,
    node_selector: dict[str, str] | None = None,
    affinity_terms: list[Json] | None = None,
    deleting: bool = False,
    stopped: bool = False,
    extra: dict[str, str] | None = None,
    priority: int | None = None,
) -> Json:
    requests: dict[str, str] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    requests.update(extra or {})
    spec: Json = {
        "schedulerName": "sandman",
        "containers": [{"name": "task", "image": image, "resources": {"requests": requests}}],
    }
    if node is not None:
        spec["nodeName"] = node
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if affinity_terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": affinity_terms
                }
            }
        }
    if priority is not None:
        spec["priority"] = priority
    meta: Json = {"uid": uid, "namespace": "sandboxes", "name": f"pod-{uid}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: Json = {"phase": phase}
    if stopped:
        status["containerStatuses"] = [{"name": "task", "state": {"terminated": {"exitCode": 0}}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
