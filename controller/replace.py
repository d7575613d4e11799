"""Replacing sandboxes the kubelet rejected before they ever ran.

Why: the planner's capacity model can be a moment behind the node (another scheduler bound a
pod there in the same instant, a static pod appeared), and the kubelet's admission check then
fails the pod — phase Failed, reason ``OutOfcpu``/``OutOfmemory``/``OutOfpods`` — before any
container started. Nothing of the sandbox existed yet, so placing it again is invisible to
the trainer. A sandbox that ever ran (a container started or the pod was Ready) is not
replaced: its files and processes are gone, so it is terminal and the garbage collector
reports and deletes it.

A replacement is a new pod with the same labels, annotations and spec (minus the binding),
named ``<original>-r<attempt>`` — deterministic, so a leader that dies halfway and its
successor cannot create two — and annotated with the pod it replaces and the attempt number.
After the create (or AlreadyExists) the rejected pod is deleted. At most ``max_attempts``
replacements per sandbox; then it stays Failed for the collector. Two writes per rejection,
none on the normal path.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import dataclass

from controller.metrics import ControllerMetrics
from controller.view import ClusterView
from kube import PODS, AlreadyExists, KubeClient, KubeError, NotFound
from kube.cache import Obj
from kube.contract import ANNOTATION_ATTEMPT, ANNOTATION_REPLACES
from kube.informer import Handlers
from sandman.base.settings import fixed, setting

__all__ = ["Replacer", "ReplacerSettings", "rejected_before_running"]

log = logging.getLogger(__name__)
ADMISSION_REASONS = ("OutOfcpu", "OutOfmemory", "OutOfpods", "OutOfephemeral-storage")


@dataclass(frozen=True, slots=True)
class ReplacerSettings:
    max_attempts: int = setting(
        3, help="replacement pods of one sandbox the kubelet rejected before it ran, at most"
    )
    replaces_annotation: str = fixed(
        ANNOTATION_REPLACES, why="the contract's name (kube/contract.py): the facade reads it"
    )
    attempt_annotation: str = fixed(
        ANNOTATION_ATTEMPT, why="the contract's name (kube/contract.py): the facade reads it"
    )


def rejected_before_running(pod: Obj) -> bool:
    """Failed by kubelet admission with no container ever started and never Ready."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed" or status.get("reason") not in ADMISSION_REASONS:
        return False
    for cs in status.get("containerStatuses") or ():
        state = cs.get("state") or {}
        if "running" in state or "terminated" in state or cs.get("restartCount"):
            return False
    return not any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


class Replacer:
    """Call :meth:`attach` once; :meth:`run` while leading."""

    def __init__(
        self,
        client: KubeClient,
        view: ClusterView,
        settings: ReplacerSettings | None = None,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        self.client = client
        self.view = view
        self.settings = settings or ReplacerSettings()
        self.metrics = metrics or ControllerMetrics()
        self._queue: asyncio.Queue[Obj] = asyncio.Queue()
        self._seen: set[str] = set()

    def attach(self) -> None:
        self.view.bound.add_handler(
            Handlers(add=self._check, update=lambda _old, new: self._check(new))
        )

    def _check(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        ours = (pod.get("spec") or {}).get("schedulerName") == self.view.settings.scheduler_name
        if ours and uid not in self._seen and rejected_before_running(pod):
            self._seen.add(uid)
            self._queue.put_nowait(pod)

    async def run(self) -> None:
        """Replace rejected sandboxes until cancelled (including those seen as a standby)."""
        while True:
            pod = await self._queue.get()
            try:
                await self.replace(pod)
            except KubeError as e:
                log.warning("replacing %s failed: %s", pod["metadata"]["name"], e)
                self._seen.discard(pod["metadata"]["uid"])  # seen again on the next relist

    def replacement(self, pod: Obj) -> Obj | None:
        """The replacement pod for ``pod`` (None once ``max_attempts`` are used up)."""
        s = self.settings
        meta = pod["metadata"]
        annotations = dict(meta.get("annotations") or {})
        attempt = int(annotations.get(s.attempt_annotation, "0")) + 1
        if attempt > s.max_attempts:
            return None
        original = annotations.get(s.replaces_annotation) or meta["name"]
        annotations[s.replaces_annotation] = original
        annotations[s.attempt_annotation] = str(attempt)
        spec = copy.deepcopy(pod["spec"])
        spec.pop("nodeName", None)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{original}-r{attempt}",
                "namespace": meta["namespace"],
                "labels": dict(meta.get("labels") or {}),
                "annotations": annotations,
                "ownerReferences": meta.get("ownerReferences") or [],
            },
            "spec": spec,
        }

    async def replace(self, pod: Obj) -> None:
        meta = pod["metadata"]
        new = self.replacement(pod)
        if new is None:
            self.metrics.replacements.labels("exhausted").inc()
            log.warning("%s/%s rejected again; no attempts left", meta["namespace"], meta["name"])
            return
        try:
            await self.client.create(PODS, new, meta["namespace"])
        except AlreadyExists:
            pass  # a previous leader got this far
        try:
            await self.client.delete(PODS, meta["name"], meta["namespace"], uid=meta["uid"])
        except NotFound:
            pass
        self.metrics.replacements.labels("replaced").inc()
        log.info(
            "%s/%s rejected by the kubelet (%s) before running: replaced by %s",
            meta["namespace"],
            meta["name"],
            (pod.get("status") or {}).get("reason"),
            new["metadata"]["name"],
        )
