"""The baseline: a binder that binds one pod at a time under kube-scheduler's default client
rate limit (QPS 50, burst 100), run as its own process.

Why a real process and not only the formula: the claim "the default kube-scheduler binds at
most ~50 pods/s" is about its client-side token bucket (client-go's default
``QPS: 50, Burst: 100``, which kube-scheduler keeps unless an operator raises it). This
binder is a model of *that* limit, not of kube-scheduler's plugins: it watches pending
pods with its own scheduler name, picks the node with the fewest of its pods (among Ready
nodes), and POSTs one ``pods/binding`` at a time behind ``TokenBucket(50, 100)`` — the same
bucket class the controller uses. The benchmark runs it after the Sandman phase of the
same run, on the same cluster, and also reports the analytic model
(:func:`load.burst.analysis.qps_model_s`).

``python -m load.burst.baseline --kubeconfig K --namespace NS --count N`` exits once it has
bound N pods.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter, deque
from typing import Any

from kube import NODES, PODS, ClientSettings, KubeClient, KubeError, TokenBucket

__all__ = ["main", "run_baseline"]

SCHEDULER_NAME = "baseline"
#: kube-scheduler's default client limit (client-go: QPS 50, burst 100).
BUCKET_QPS = 50.0
BUCKET_BURST = 100


def _ready_nodes(listing: dict[str, Any]) -> list[str]:
    out = []
    for node in listing.get("items") or []:
        conditions = (node.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            out.append(node["metadata"]["name"])
    return sorted(out)


async def run_baseline(
    client: KubeClient,
    namespace: str,
    count: int,
    qps: float = BUCKET_QPS,
    burst: int = BUCKET_BURST,
) -> int:
    """Bind ``count`` pending pods of scheduler ``baseline``, one request in flight."""
    nodes = _ready_nodes(await client.list(NODES))
    placed: Counter[str] = Counter({n: 0 for n in nodes})
    bucket = TokenBucket(qps, burst)
    queue: deque[tuple[str, str]] = deque()
    seen: set[str] = set()
    bound = 0
    selector = f"spec.schedulerName={SCHEDULER_NAME},spec.nodeName="
    last_log = time.monotonic()
    while bound < count:
        if not queue:
            listing = await client.list(PODS, namespace, field_selector=selector)
            for pod in listing.get("items") or []:
                meta = pod["metadata"]
                if meta["uid"] not in seen:
                    seen.add(meta["uid"])
                    queue.append((meta["name"], meta["uid"]))
            if not queue:
                await asyncio.sleep(0.05)
                continue
        name, uid = queue.popleft()
        node = min(nodes, key=lambda n: placed[n])
        await bucket.acquire()
        try:
            await client.bind(namespace, name, uid, node)
        except KubeError as e:
            print(f"bind {name}: {e}", file=sys.stderr, flush=True)
            continue
        placed[node] += 1
        bound += 1
        if time.monotonic() - last_log > 5:
            last_log = time.monotonic()
            print(f"baseline: bound {bound}/{count}", file=sys.stderr, flush=True)
    return bound


async def _main(a: argparse.Namespace) -> int:
    # The bucket above is the limit under test; the client's own is off.
    settings = ClientSettings(qps=0, max_connections=4)
    async with await KubeClient.connect(settings, kubeconfig=a.kubeconfig) as client:
        n = await run_baseline(client, a.namespace, a.count, a.qps, a.burst)
    print(f"baseline: bound {n}", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m load.burst.baseline", description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--qps", type=float, default=BUCKET_QPS)
    p.add_argument("--burst", type=int, default=BUCKET_BURST)
    return asyncio.run(_main(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
