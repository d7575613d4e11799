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
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from kube import PODS, KubeClient
from load.burst.analysis import ApiCounters, parse_metrics

__all__ = ["MetricsReader", "count_pods"]


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
