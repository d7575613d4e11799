"""Builders of Kubernetes Pod and Node JSON (plain dicts, as the API serves them).

- :func:`pod`: a pod to create through the API (a name, labels, the sandbox scheduler), as
  the controller and client-layer tests send it;
- :func:`sandbox_pod`: a sandbox pod as the facade reads it back (labels, annotations and a
  status row by row of facade/state.py's table);
- :func:`node_json`, :func:`pod_json`: nodes and pods as the placement engine's cluster model
  takes them, with every field the filters and scores look at.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Json", "node_json", "pod", "pod_json", "sandbox_pod"]

Json = dict[str, Any]


def pod(name: str, *, scheduler: str = "sandman", **labels: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {
                    "name": "task",
                    "image": "registry.local/task:1",
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                }
            ],
        },
    }


def sandbox_pod(
    *,
    node: str | None = None,
    phase: str = "Pending",
    ready: bool = False,
    deleting: bool = False,
    reason: str | None = None,
    attempt: int = 0,
    waiting: str | None = None,
    ran: bool = False,
) -> Json:
    """Sandbox ``sb-1`` of owner ``run-1`` in namespace ``ns`` (``sb-1-r<attempt>`` once
    replaced), in the state the arguments describe."""
    status: Json = {"phase": phase}
    if reason:
        status["reason"] = reason
    if ready:
        status["conditions"] = [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:00:01Z"}
        ]
    if waiting:
        status["containerStatuses"] = [{"state": {"waiting": {"reason": waiting}}}]
    if ran:
        status["containerStatuses"] = [
            {"state": {"terminated": {"startedAt": "2026-11-30T10:00:00Z", "exitCode": 1}}}
        ]
    meta: Json = {
        "name": "sb-1" if not attempt else f"sb-1-r{attempt}",
        "namespace": "ns",
        "uid": "u1",
        "labels": {
            "sandman.io/sandbox": "sb-1",
            "sandman.io/owner": "run-1",
            "sandman.io/class": "tiny",
            "user.sandman.io/task": "t7",
        },
        "annotations": {"sandman.io/attempt": str(attempt), "sandman.io/expires-at": "X"},
        "creationTimestamp": "2026-11-30T10:00:00Z",
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T10:01:00Z"
    spec = {"containers": [{"image": "img:1"}], **({"nodeName": node} if node else {})}
    return {"metadata": meta, "spec": spec, "status": status}


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
