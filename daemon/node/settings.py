"""The node agent's settings: one frozen dataclass; the command line is generated from it.

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

from kube.preparation_contract import AGENT_LEASE_NAMESPACE
from sandman.base.backoff import Backoff
from sandman.base.settings import LOG_LEVELS, fixed, setting

__all__ = ["AgentSettings"]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    node_name: str = setting(
        "", help="the node this agent runs on (the downward API's spec.nodeName); required",
        env="NODE_NAME",
    )  # fmt: skip
    namespace: str = setting(
        AGENT_LEASE_NAMESPACE,
        help="where the per-node Leases live, apart from the election Lease's namespace; "
        '"": the credentials\' namespace',
    )
    kubeconfig: str | None = setting(
        None, help="kubeconfig path; none: $KUBECONFIG, then in-cluster"
    )
    cri_socket: str = setting(
        "/run/containerd/containerd.sock", help="the container runtime's CRI socket"
    )
    pull_parallelism: int = setting(2, help="pulls at once on this node")
    pull_timeout_s: float = setting(
        900.0, help="the longest a single PullImage may take before it counts as failed"
    )
    retry_initial_s: float = setting(
        2.0, help="a failed image is retried after retry_initial_s * 2**(n-1), capped, jittered"
    )
    retry_cap_s: float = setting(300.0, help="the longest wait before a failed image's retry")
    reconcile_interval_s: float = setting(
        30.0,
        help="between ListImages reconciliations (finds images the kubelet's GC removed or "
        "pods pulled)",
    )
    min_write_interval_s: float = setting(
        5.0, help="at most one write of the Lease this often (batching ready-set changes)"
    )
    renew_interval_s: float = setting(30.0, help="between renewals of the Lease (liveness)")
    lease_duration_s: int = setting(90, help="the Lease's duration (above renew_interval_s)")
    max_held_events: int = setting(
        16,
        help="refused Events held to be sent again (daemon/node/events.py); beyond it the "
        "oldest is dropped (counted)",
    )
    release_after_s: float = setting(
        300.0, help="an image this agent pulled is removed this long after it stops being planned"
    )
    state_dir: str = setting(
        "/var/lib/sandman/node-agent",
        help='where the agent records which images it pulled ("": in memory only)',
    )
    bundle_source: str = setting(
        "", help='the daemon bundle to keep on the node for hostPath delivery ("": not kept)'
    )
    bundle_root: str = setting(
        "/var/lib/sandman/bundle",
        help="versions go to <bundle_root>/<digest>/, <bundle_root>/current points at one",
    )
    kubelet_config: str = setting(
        "",
        help="the node's kubelet config file (KubeletConfiguration, YAML or JSON, mounted "
        'read-only) to check for the settings that contain a sandbox ("": not checked; '
        "daemon/node/hardening.py)",
    )
    bundle_keep: int = setting(3, help="bundle versions kept")
    bundle_check_interval_s: float = setting(
        300.0, help="between checks of the kept bundle's digest (copied again if altered)"
    )
    health_host: str = setting("127.0.0.1", help="address of /healthz, /readyz, /metrics")
    health_port: int = setting(8791, help="port of /healthz, /readyz, /metrics")
    qps: float = setting(
        5.0, help="client-side rate limit towards the API server (the agent writes little)"
    )
    burst: int = setting(10, help="the rate limit's bucket size")
    component: str = fixed(
        "sandman-node-agent", why="the source of its Events and its User-Agent: its name"
    )
    log_level: str = setting("INFO", help="logging level", choices=LOG_LEVELS)

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
