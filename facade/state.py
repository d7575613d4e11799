"""What a trainer sees of a sandbox, derived from its Pod (pure functions, no I/O).

The facade stores nothing: a sandbox's state is read off its pod as the watch cache has it,
plus the two things a pod does not say by itself — why the binder could not place it (its
``FailedScheduling`` Event) and why the garbage collector deleted it (its ``SandboxDeleted``
Event). The mapping is deliberately coarse: six states, and a stable ``reason`` when a
sandbox is not simply progressing, so trainer code can branch on it.

| pod | state | reason |
|---|---|---|
| deletionTimestamp set | ``releasing`` | |
| no node; a FailedScheduling Event | ``pending`` | ``unschedulable`` (the scheduler's message) |
| no node | ``pending`` | |
| Failed by kubelet admission, replacements left | ``pending`` | ``admission_rejected`` |
| Failed by kubelet admission, none left | ``failed`` | ``admission_failed`` |
| image cannot be pulled | ``failed`` | ``image_pull_failed`` |
| Ready | ``ready`` | |
| bound, not Ready (yet) | ``starting`` | (``daemon_not_ready`` if it was Ready before) |
| Succeeded or Failed after running | ``terminated`` | ``sandbox_exited`` / ``sandbox_failed`` |
| Failed without running | ``failed`` | ``sandbox_failed`` |
| deleted by the garbage collector | ``terminated`` | the collector's: ``ttl_expired``, ... |
"""

from __future__ import annotations

from typing import Any

from kube.contract import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_EXPIRES_AT,
    LABEL_CLASS,
    LABEL_OWNER,
    LABEL_SANDBOX,
)
from sandman.wire.facade import Sandbox, SandboxState

__all__ = [
    "ADMISSION_REASONS",
    "GC_REASONS",
    "IMAGE_PULL_REASONS",
    "USER_LABEL_PREFIX",
    "attempt_of",
    "is_live",
    "sandbox_from_pod",
]

Obj = dict[str, Any]
USER_LABEL_PREFIX = "user.sandman.io/"
ADMISSION_REASONS = frozenset(
    {"OutOfcpu", "OutOfmemory", "OutOfpods", "OutOfephemeral-storage", "UnexpectedAdmissionError"}
)
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
#: The garbage collector's deletion reasons (controller/collector.py) as trainer-facing reasons.
GC_REASONS = {
    "expired": "ttl_expired",
    "owner-expired": "owner_expired",
    "node-gone": "node_lost",
    "idle": "idle_timeout",
    "terminal": "sandbox_exited",
    "pending-timeout": "pending_timeout",
}


def attempt_of(pod: Obj) -> int:
    raw = (pod["metadata"].get("annotations") or {}).get(ANNOTATION_ATTEMPT, "0")
    try:
        return int(raw)
    except ValueError:
        return 0


def is_live(pod: Obj) -> bool:
    """Counts against the tenant's concurrent-sandbox limit."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def sandbox_from_pod(
    pod: Obj,
    *,
    unschedulable: str | None = None,
    was_ready: bool = False,
    max_attempts: int = 3,
) -> Sandbox:
    """The trainer's view of ``pod``. ``unschedulable``: the binder's message, if any."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    state, reason, message = _state(pod, unschedulable, was_ready, max_attempts)
    return Sandbox(
        id=labels.get(LABEL_SANDBOX, meta["name"]),
        owner=labels.get(LABEL_OWNER, ""),
        sandbox_class=labels.get(LABEL_CLASS, ""),
        image=containers[0].get("image", ""),
        state=state,
        reason=reason,
        message=message,
        node=(pod.get("spec") or {}).get("nodeName") or None,
        attempt=attempt_of(pod),
        labels={
            k[len(USER_LABEL_PREFIX) :]: v
            for k, v in labels.items()
            if k.startswith(USER_LABEL_PREFIX)
        },
        created_at=meta.get("creationTimestamp"),
        ready_at=_ready_since(pod),
        expires_at=(meta.get("annotations") or {}).get(ANNOTATION_EXPIRES_AT),
    )


def _state(
    pod: Obj, unschedulable: str | None, was_ready: bool, max_attempts: int
) -> tuple[SandboxState, str | None, str | None]:
    if pod["metadata"].get("deletionTimestamp"):
        return "releasing", None, None
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase in ("Succeeded", "Failed"):
        return _finished(pod, status, was_ready, max_attempts)
    if not (pod.get("spec") or {}).get("nodeName"):
        if unschedulable:
            return "pending", "unschedulable", unschedulable
        return "pending", None, None
    pull = _image_pull_failure(status)
    if pull is not None:
        return "failed", "image_pull_failed", pull
    if _ready_since(pod) is not None:
        return "ready", None, None
    if was_ready:
        return "starting", "daemon_not_ready", "the sandbox daemon stopped answering its probe"
    return "starting", None, None


def _finished(
    pod: Obj, status: Obj, was_ready: bool, max_attempts: int
) -> tuple[SandboxState, str | None, str | None]:
    message = status.get("message") or status.get("reason")
    ran = was_ready or _container_ran(status)
    if status.get("phase") == "Failed" and not ran and status.get("reason") in ADMISSION_REASONS:
        if attempt_of(pod) < max_attempts:
            return "pending", "admission_rejected", message
        return "failed", "admission_failed", message
    if status.get("phase") == "Succeeded":
        return "terminated", "sandbox_exited", message or "the sandbox daemon exited"
    return ("terminated" if ran else "failed"), "sandbox_failed", message


def _container_ran(status: Obj) -> bool:
    for cs in status.get("containerStatuses") or ():
        state = cs.get("state") or {}
        if "running" in state or (state.get("terminated") or {}).get("startedAt"):
            return True
    return False


def _image_pull_failure(status: Obj) -> str | None:
    for cs in status.get("containerStatuses") or ():
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            return str(waiting.get("message") or waiting["reason"])
    return None


def _ready_since(pod: Obj) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready" and c.get("status") == "True":
            return str(c.get("lastTransitionTime") or "") or None
    return None
