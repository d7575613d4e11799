"""A simulated kubelet's node presence: it registers the Node (capacity, conditions,
addresses, nodeInfo, ``status.images``) and its Lease in ``kube-node-lease``, renews the
lease every ``lease_interval_s`` and posts node status every ``status_interval_s`` or soon
after an image pull, like the real kubelet's node-status and lease controllers. A node made
NotReady by a fault stops both, and its Ready condition reads Unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import platform
import random
import uuid
from datetime import UTC, datetime
from typing import Any

from simcluster.apiserver.local import LocalApiError, LocalClient
from simcluster.apiserver.meta import rfc3339
from simcluster.kubelet.images import ImageCache
from simcluster.kubelet.metrics import KubeletMetrics
from simcluster.kubelet.settings import NodeSettings

__all__ = ["NodePresence"]

log = logging.getLogger(__name__)
Obj = dict[str, Any]


def _micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodePresence:
    def __init__(
        self,
        name: str,
        ip: str,
        client: LocalClient,
        settings: NodeSettings,
        runtime_name: str,
        rng: random.Random,
        metrics: KubeletMetrics | None,
    ) -> None:
        self.name = name
        self.ip = ip
        self.client = client
        self.settings = settings
        self.runtime_name = runtime_name
        self.metrics = metrics
        self.images: ImageCache | None = None  # set by the kubelet once its cache exists
        self.not_ready = False
        self._dirty = asyncio.Event()
        self._lease: Obj | None = None
        self._machine_id = hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()
        self._boot_id = str(uuid.UUID(int=rng.getrandbits(128)))
        self.labels: dict[str, str] = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "simcluster",
            **settings.labels,
        }
        # the taints the kubelet checks at admission (from its settings)
        self.taints: list[Obj] = [dict(t) for t in settings.taints]

    def _conditions(self) -> list[Obj]:
        now = rfc3339()
        ready = "Unknown" if self.not_ready else "True"
        reason = "NodeStatusUnknown" if self.not_ready else "KubeletReady"
        msg = (
            "Kubelet stopped posting node status."
            if self.not_ready
            else "kubelet is posting ready status"
        )
        pressures = (("MemoryPressure", "Memory"), ("DiskPressure", "Disk"), ("PIDPressure", "PID"))
        conds = [
            {
                "type": t,
                "status": "False",
                "reason": f"KubeletHasSufficient{r}",
                "message": f"kubelet has sufficient {r.lower()}",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            for t, r in pressures
        ]
        conds.append(
            {
                "type": "Ready",
                "status": ready,
                "reason": reason,
                "message": msg,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        )
        return conds

    def _node_status(self) -> Obj:
        res = {
            "cpu": self.settings.cpu,
            "memory": self.settings.memory,
            "pods": str(self.settings.max_pods),
            "ephemeral-storage": "100Gi",
        }
        return {
            "capacity": res,
            "allocatable": dict(res),
            "conditions": self._conditions(),
            "addresses": [
                {"type": "InternalIP", "address": self.ip},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "kubeletVersion": self.settings.kubelet_version,
                "kubeProxyVersion": self.settings.kubelet_version,
                "containerRuntimeVersion": f"simcluster://{self.runtime_name}",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "osImage": "simcluster",
                "kernelVersion": platform.release(),
                "machineID": self._machine_id,
                "systemUUID": self._machine_id,
                "bootID": self._boot_id,
            },
            "images": (self.images.status_images() if self.images else []),
        }

    async def register(self) -> None:
        labels = self.labels
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {"taints": [dict(t) for t in self.settings.taints]}
            if self.settings.taints
            else {},
        }
        with contextlib.suppress(LocalApiError):
            await self.client.request("create", "nodes", body=node)
        await self.client.request(
            "patch",
            "nodes",
            name=self.name,
            subresource="status",
            body={"status": self._node_status()},
            content_type="application/merge-patch+json",
        )
        lease = {
            "metadata": {"name": self.name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.name,
                "leaseDurationSeconds": 40,
                "renewTime": _micro(),
            },
        }
        try:
            self._lease = await self.client.request(
                "create",
                "leases",
                namespace="kube-node-lease",
                body=lease,
                group="coordination.k8s.io",
            )
        except LocalApiError:
            self._lease = await self.client.request(
                "get",
                "leases",
                namespace="kube-node-lease",
                name=self.name,
                group="coordination.k8s.io",
            )

    def mark_dirty(self) -> None:
        """An image pull completed: publish node.status.images soon."""
        if self.metrics is not None:
            self.metrics.pulls.inc()
        self._dirty.set()

    async def heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_interval_s)
            if self.not_ready or self._lease is None:
                continue
            self._lease["spec"]["renewTime"] = _micro()
            try:
                self._lease = await self.client.request(
                    "update",
                    "leases",
                    namespace="kube-node-lease",
                    name=self.name,
                    body=self._lease,
                    group="coordination.k8s.io",
                )
            except LocalApiError as e:
                log.debug("lease renew failed on %s: %s", self.name, e)
                with contextlib.suppress(LocalApiError):
                    self._lease = await self.client.request(
                        "get",
                        "leases",
                        namespace="kube-node-lease",
                        name=self.name,
                        group="coordination.k8s.io",
                    )

    async def status_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.status_interval_s):
                    await self._dirty.wait()
            self._dirty.clear()
            await self.post_node_status()
            await asyncio.sleep(1.0)  # coalesce bursts of image pulls into one write

    async def post_node_status(self, force: bool = False) -> None:
        """Post conditions and images (a NotReady node posts nothing unless forced, which is
        how the node lifecycle controller's Unknown condition is written)."""
        if self.not_ready and not force:
            return
        status = {
            "conditions": self._conditions(),
            "images": (self.images.status_images() if self.images else []),
        }
        try:
            await self.client.request(
                "patch",
                "nodes",
                name=self.name,
                subresource="status",
                body={"status": status},
                content_type="application/merge-patch+json",
            )
        except LocalApiError as e:
            log.debug("node status update failed on %s: %s", self.name, e)
