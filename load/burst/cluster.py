"""The benchmark's small Kubernetes helpers: read simcluster's /metrics, count pods.

Why /metrics over HTTP: the API server's own request counters (per verb, resource, user and
code) are the only unbiased count of the writes each sandbox cost — the controller's and
facade's counters would only count what they think they sent. The endpoint serves text,
not JSON, so it is read with a plain aiohttp request carrying the admin kubeconfig's
credentials.
"""

from __future__ import annotations

import base64
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from kube import PODS, KubeClient
from kube.contract import LABEL_OWNER, LABEL_SANDBOX
from kube.pool_contract import LABEL_POOL, SANDBOX_CLAIMS
from load.burst.analysis import ApiCounters, parse_metrics, parse_samples

__all__ = [
    "FACADE_COUNTERS",
    "MetricsReader",
    "RunSandboxes",
    "count_pods",
    "facade_counters",
    "run_sandboxes",
]


class MetricsReader:
    """``await reader.read()`` → the API server's counters now."""

    def __init__(self, kubeconfig: Path) -> None:
        config: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        self._url = cluster["server"].rstrip("/") + "/metrics"
        self._headers = {"Authorization": f"Bearer {user['token']}"}
        ca = cluster.get("certificate-authority-data")
        self._ssl: ssl.SSLContext | bool = (
            ssl.create_default_context(cadata=base64.b64decode(ca).decode()) if ca else False
        )

    async def read(self) -> ApiCounters:
        return parse_metrics(await self.text())

    async def text(self) -> str:
        """The whole /metrics text (the kubelets' image-pull figures are in it too)."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                self._url,
                headers=self._headers,
                ssl=self._ssl,
                timeout=aiohttp.ClientTimeout(total=30),
            ) as resp,
        ):
            resp.raise_for_status()
            return await resp.text()


async def count_pods(client: KubeClient, namespace: str, label_selector: str) -> int:
    listing = await client.list(PODS, namespace, label_selector=label_selector)
    return len(listing.get("items") or [])


@dataclass(frozen=True, slots=True)
class RunSandboxes:
    """What the cluster holds of a run once its burst is over (before the release)."""

    #: The run's SandboxClaims: name -> the pool pods each holds.
    claims: dict[str, list[str]] = field(default_factory=dict)
    #: The run's live sandboxes by id: pods with its owner label, pool pods its claims hold.
    live: set[str] = field(default_factory=set)
    #: Of those, the ones not Ready: id -> why (the PodScheduled reason, else the phase).
    not_ready: dict[str, str] = field(default_factory=dict)


async def run_sandboxes(client: KubeClient, namespace: str, owner: str) -> RunSandboxes:
    """The run's SandboxClaims (those whose owner is ``owner``) and its live sandboxes, for
    the hand-over checks (load/burst/handover.py): listed once the burst is over, before
    the release. A pod being deleted is not live."""
    listing = await client.list(SANDBOX_CLAIMS, namespace)
    claims = {
        c["metadata"]["name"]: list(c["spec"].get("pods") or [])
        for c in listing.get("items") or []
        if (c.get("spec") or {}).get("owner") == owner
    }
    held = {pod for pods in claims.values() for pod in pods}
    owned = await client.list(PODS, namespace, label_selector=f"{LABEL_OWNER}={owner}")
    pooled = await client.list(PODS, namespace, label_selector=LABEL_POOL) if held else {}
    out = RunSandboxes(claims)
    for pod in (*(owned.get("items") or []), *(pooled.get("items") or [])):
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if meta.get("deletionTimestamp") or (LABEL_POOL in labels and meta["name"] not in held):
            continue
        sid = labels.get(LABEL_SANDBOX) or meta["name"]
        out.live.add(sid)
        why = _not_ready(pod.get("status") or {})
        if why:
            out.not_ready[sid] = why
    return out


def _not_ready(status: dict[str, Any]) -> str:
    """ "" for a Ready pod; else its PodScheduled reason (e.g. Unschedulable) or its phase."""
    conditions = {c.get("type"): c for c in status.get("conditions") or ()}
    if (conditions.get("Ready") or {}).get("status") == "True":
        return ""
    scheduled = conditions.get("PodScheduled") or {}
    if scheduled.get("status") == "False":
        return str(scheduled.get("reason") or "not scheduled")
    return str(status.get("phase") or "Pending")


#: The facades' own counters of how each pod was created (the API server cannot tell a
#: pre-placed create from an unbound one that fell back), why, and the failovers waited
#: out: metric name -> its label ("" for none).
FACADE_COUNTERS = {
    "sandman_facade_pod_creates_total": "placement",
    "sandman_facade_placement_pods_total": "outcome",
    "sandman_facade_placement_waits_total": "outcome",
    "sandman_facade_placements_ran_out_total": "",
    "sandman_facade_pool_claims_total": "outcome",
    "sandman_facade_pool_claimed_sandboxes_total": "",
}


async def facade_counters(urls: list[str]) -> dict[str, float]:
    """``"<metric>{<label value>}"`` -> the sum over the facades at ``urls``."""
    out: dict[str, float] = {}
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for url in urls:
            async with session.get(url + "/metrics") as resp:
                resp.raise_for_status()
                text = await resp.text()
            for name, labels, value in parse_samples(text):
                label = FACADE_COUNTERS.get(name)
                if label is not None:
                    which = f"{{{labels.get(label, '')}}}" if label else ""
                    key = f"{name.removeprefix('sandman_facade_')}{which}"
                    out[key] = out.get(key, 0.0) + value
    return dict(sorted(out.items()))
