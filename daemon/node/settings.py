"""The node agent's settings: one frozen dataclass; the command line's flags default to it.

Why these defaults: pulls are bounded at 2 per node (the kubelet's own pulls share the
runtime, and containerd unpacking is CPU- and disk-bound: more in parallel only slows each);
the Lease is renewed every 30 s with a 90 s duration (liveness is for planning, not for
fencing, so it can be lax: 400 nodes cost ~13 writes/s at most); ready-set changes are
written at most every 5 s per node, batched (a node finishing 10 pulls in a burst writes
once or twice, not 10 times); an image it pulled is removed 5 minutes after it stops being
wanted (a trainer's next step often asks for the same images again).
"""

from __future__ import annotations

from dataclasses import dataclass

from sandman.wire.backoff import Backoff

__all__ = ["AgentSettings"]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    #: The node this agent runs on ($NODE_NAME from the downward API in the DaemonSet).
    node_name: str = ""
    #: Sandman's namespace (where the per-node Leases live); "": the credentials' namespace.
    namespace: str = ""
    kubeconfig: str | None = None
    #: The container runtime's CRI socket.
    cri_socket: str = "/run/containerd/containerd.sock"
    #: Pulls at once on this node.
    pull_parallelism: int = 2
    #: Longest a single PullImage may take before it counts as failed.
    pull_timeout_s: float = 900.0
    #: A failed image is retried after ``retry_initial_s * 2**(n-1)``, capped, full jitter.
    retry_initial_s: float = 2.0
    retry_cap_s: float = 300.0
    #: ListImages reconciliation (finds images the kubelet's GC removed or pods pulled).
    reconcile_interval_s: float = 30.0
    #: At most one write of the Lease per this many seconds (batching ready-set changes).
    min_write_interval_s: float = 5.0
    #: Renewal of the Lease (liveness), and its duration.
    renew_interval_s: float = 30.0
    lease_duration_s: int = 90
    #: Refused Events held to be sent again (daemon/node/events.py); beyond it the oldest
    #: is dropped (counted).
    max_held_events: int = 16
    #: An image this agent pulled is removed this long after it stops being planned.
    release_after_s: float = 300.0
    #: Where the agent records which images it pulled ("" = in memory only).
    state_dir: str = "/var/lib/sandman/node-agent"
    #: The daemon bundle to keep on the node for hostPath delivery ("" = not kept).
    bundle_source: str = ""
    #: Versions go to ``<bundle_root>/<digest>/``, ``<bundle_root>/current`` points at one.
    bundle_root: str = "/var/lib/sandman/bundle"
    bundle_keep: int = 3
    bundle_check_interval_s: float = 300.0
    #: /healthz and /metrics.
    health_host: str = "127.0.0.1"
    health_port: int = 8791
    #: Client-side rate limit towards the API server (the agent writes little).
    qps: float = 5.0
    burst: int = 10
    component: str = "sandman-node-agent"

    def __post_init__(self) -> None:
        if self.pull_parallelism < 1:
            raise ValueError("pull_parallelism must be >= 1")
        if min(self.min_write_interval_s, self.renew_interval_s, self.reconcile_interval_s) <= 0:
            raise ValueError("intervals must be > 0")
        if self.lease_duration_s <= self.renew_interval_s:
            raise ValueError("lease_duration_s must exceed renew_interval_s")
        if self.bundle_keep < 1:
            raise ValueError("bundle_keep must be >= 1")
        if self.max_held_events < 1:
            raise ValueError("max_held_events must be >= 1")
        self.backoff  # noqa: B018 - validates the retry values now

    @property
    def backoff(self) -> Backoff:
        """Delays between pull attempts of one image (the one backoff helper)."""
        return Backoff(initial_s=self.retry_initial_s, cap_s=self.retry_cap_s, jitter="equal")

    @property
    def event_backoff(self) -> Backoff:
        """Delays between retries of refused Events: the renewal cadence, doubling to four
        renewals (an operator who restored the rule waits at most that long)."""
        renew = self.renew_interval_s
        return Backoff(initial_s=renew, cap_s=4 * renew, jitter="equal")
