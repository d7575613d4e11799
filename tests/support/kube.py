"""The Kubernetes client layer (``kube``) as tests drive it against an embedded simcluster:
client settings that fail fast, and simcluster's fault injection over its HTTP endpoint."""

from __future__ import annotations

from typing import Any

from kube import ClientSettings, KubeClient, Timeouts

__all__ = ["FAST", "inject"]

#: Short timeouts, no client-side rate limit, quick retries: a test's mistake or an injected
#: fault shows within seconds, not after production's patient back-off.
FAST = ClientSettings(
    timeouts=Timeouts(connect=2.0, request=5.0, watch_idle=5.0),
    qps=0,
    backoff_base=0.01,
    backoff_cap=0.05,
)


async def inject(client: KubeClient, **fault: Any) -> None:
    """Apply a simcluster fault (``POST /admin/faults``) over the real HTTP endpoint."""
    await client.request("POST", "/admin/faults", body=fault)
