"""The agent's per-node Lease: its liveness and what is ready on its node, written within
bounds.

Why a Lease (docs/node-agent.md, "The published object"): one small object per node in
Sandman's namespace that the controller already watches the kind of; renewing it is the
agent's heartbeat, so "the agent is alive" and "these images are ready" come in one object
and one write. Each writer owns its annotations and writes them with a JSON merge patch — the
agent its ready set, failures and bundle digest, the controller its plan — so neither reads,
modifies and writes the other's part, and no write conflicts.

Write bounds: at most one write per ``min_write_interval_s``; a write happens only when the
published content changed or the renewal (``renew_interval_s``) is due. Changes in between
are batched into the next write. :meth:`LeasePublisher.due_in` says when that is.

A refused write (403) is not a crash, not even at start: the client (daemon/node/access.py)
counts it, logs it once and holds it, which fails the agent's ``/readyz``; the next due
flush tries again — taking the Lease over first if that is what was refused — and a write
that works clears it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from daemon.node.access import ApiAccess
from daemon.node.metrics import AgentMetrics
from daemon.node.settings import AgentSettings
from kube.errors import Forbidden, KubeError, NotFound
from kube.preparation_contract import (
    ANNOTATION_BUNDLE,
    ANNOTATION_FAILED,
    ANNOTATION_READY,
    ANNOTATION_TRUNCATED,
    LABEL_NODE_AGENT,
    READY_BUDGET,
    encode_failed,
    encode_images,
    lease_name,
)
from kube.resources import LEASES
from kube.times import format_micro_time

__all__ = ["LeasePublisher", "Published"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Published:
    """The annotations the agent owns, encoded (equal content, equal strings)."""

    ready: str = "[]"
    failed: str = "{}"
    truncated: int = 0
    bundle: str = ""

    @classmethod
    def build(
        cls,
        ready: Collection[str],
        failed: Mapping[str, tuple[str, str]],
        first: Collection[str],
        bundle: str = "",
    ) -> Published:
        text, left_out = encode_images(ready, READY_BUDGET, first)
        return cls(text, encode_failed(failed), left_out, bundle)

    def annotations(self) -> dict[str, str | None]:
        return {
            ANNOTATION_READY: self.ready,
            ANNOTATION_FAILED: self.failed,
            ANNOTATION_TRUNCATED: str(self.truncated) if self.truncated else None,
            ANNOTATION_BUNDLE: self.bundle or None,
        }


class LeasePublisher:
    def __init__(
        self,
        settings: AgentSettings,
        client: ApiAccess,
        namespace: str,
        metrics: AgentMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.client = client
        self.namespace = namespace
        self.name = lease_name(settings.node_name)
        self.metrics = metrics
        self._clock = clock
        self._wanted = Published()
        self._written: Published | None = None
        self._last_write = -1e18
        self.writes = 0
        #: The Lease was taken over (or created) by this agent; False until then.
        self.acquired = False

    def _spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.settings.node_name,
            "leaseDurationSeconds": self.settings.lease_duration_s,
            "renewTime": format_micro_time(),
        }

    async def ensure(self) -> None:
        """Create the Lease, or take it over after a restart (one write either way)."""
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {LABEL_NODE_AGENT: "true"},
                "annotations": {"sandman.io/node": self.settings.node_name},
            },
            "spec": {**self._spec(), "acquireTime": format_micro_time()},
        }
        self._last_write = self._clock()  # a refused take-over is not retried sooner either
        try:
            await self.client.patch(LEASES, self.name, {"spec": body["spec"]}, self.namespace)
        except NotFound:
            await self.client.create(LEASES, body, self.namespace)
        self.acquired = True
        self.writes += 1
        self.metrics.lease_writes.labels("acquire").inc()

    def offer(self, content: Published) -> None:
        """What should be published; written by the next :meth:`flush` that is due."""
        self._wanted = content

    def due_in(self) -> float:
        """Seconds until the next write is due (0: now; a large value: nothing to write)."""
        since = self._clock() - self._last_write
        renew = self.settings.renew_interval_s - since
        if self._wanted != self._written:
            return max(0.0, min(renew, self.settings.min_write_interval_s - since))
        return max(0.0, renew)

    async def flush(self) -> bool:
        """Write if due; True if a write was made."""
        if self.due_in() > 0:
            return False
        content = self._wanted
        cause = "renew" if content == self._written else "changed"
        patch = {"metadata": {"annotations": content.annotations()}, "spec": self._spec()}
        self._last_write = self._clock()  # a failed write is not retried sooner either
        try:
            if not self.acquired:  # refused so far: take it over first, publish next time
                await self.ensure()
                return True
            try:
                await self.client.patch(LEASES, self.name, patch, self.namespace)
            except NotFound:
                await self.ensure()  # deleted under us: recreate, publish on the next flush
                return True
        except KubeError as e:
            self.metrics.errors.labels("kube").inc()
            if not isinstance(e, Forbidden):  # a 403 is logged once, by the client
                log.warning("writing Lease %s/%s failed: %s", self.namespace, self.name, e)
            return False
        self._written = content
        self.writes += 1
        self.metrics.lease_writes.labels(cause).inc()
        return True
