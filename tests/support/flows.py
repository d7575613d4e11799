"""The flow map: every connection Sandman's components make, and the ones they must not be
able to make, held against the NetworkPolicies every overlay renders
(tests/manifests/test_network.py) the way tests/manifests/test_rbac.py holds RBAC to the API
calls.

Why a Python table (in tests/support, where what tests share lives) and not a
``manifests/flows.yaml``: the map's ports and paths must be the code's own (one
definition), and only code can name them — a flow names a *listener*, whose port
test_network.listeners resolves as the process would listen: the rendered workload's args
parsed by the process's own flag parser (its settings' defaults where no flag is passed),
the daemon's ``daemon.sandbox.layout.DAEMON_PORT``; the placement path is
``kube.placement.PLACEMENT_PATH`` (a test holds the facade→controller row to it).
Nothing outside the tests reads the map, so it ships nowhere; the operator guide shows it as
a table generated from here (``python -m tests.support.flows``), kept equal by a test.

Endpoints (test_network.endpoints) are abstract pods and addresses: a component's pod
carries the labels its rendered workload template gives it; a sandbox the labels
facade/podspec.py renders, one per sandbox class of the production configuration; a
trainer, the API server and the internet are addresses no policy selects. A denied flow's
``code`` names the policy file that denies it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FLOWS", "Flow"]


@dataclass(frozen=True)
class Flow:
    """``src`` connects to ``dst`` on listener ``port`` (a listener name of
    test_network.listeners, or a number for what is not Sandman's); ``allowed``: whether
    the rendered policies must let it through; ``code``: where the connection is made (or,
    for a denied flow, why it must not be)."""

    src: str
    dst: str
    port: str | int
    allowed: bool
    code: str
    why: str
    protocol: str = "TCP"

    def row(self) -> str:
        verdict = "allowed" if self.allowed else "**denied**"
        return (
            f"| {self.src} | {self.dst} | {self.port}/{self.protocol} | {verdict} "
            f"| `{self.code}` | {self.why} |"
        )


Y, N = True, False
#: Tool calls and forwarded ports (facade/port_proxy.py) alike: a sandbox's server is reached
#: through its daemon, never on a port of its own.
_DAEMON_HOP = "tool calls and forwarded ports (/v1/ports/...), pod IP:8790"
FLOWS = (
    # --- what the code needs ---------------------------------------------------------------
    Flow("trainer", "facade", "facade", Y, "sdk/sandman/client.py",
         "the trainer API (and tool calls)"),
    Flow("facade", "controller", "placement", Y, "kube/placement.py",
         "POST /internal/v1/placements on the leader's advertised URL (pre-placed creates)"),
    Flow("facade", "sandbox-tiny", "daemon", Y, "facade/proxy.py", _DAEMON_HOP),
    Flow("facade", "sandbox-build", "daemon", Y, "facade/proxy.py", _DAEMON_HOP),
    Flow("facade", "sandbox-internet", "daemon", Y, "facade/proxy.py", _DAEMON_HOP),
    Flow("controller", "apiserver", 443, Y, "kube/credentials.py",
         "watches, binds, Leases (in-cluster: KUBERNETES_SERVICE_HOST)"),
    Flow("facade", "apiserver", 443, Y, "kube/credentials.py", "creates, watches, Leases"),
    Flow("node-agent", "apiserver", 443, Y, "kube/credentials.py", "its Lease, Events"),
    Flow("scraper", "controller", "controller", Y, "controller/app.py", "/metrics"),
    Flow("scraper", "facade", "facade-metrics", Y, "facade/app.py", "/metrics (--metrics-port)"),
    Flow("scraper", "node-agent", "node-agent", Y, "daemon/node/app.py", "/metrics"),
    Flow("sandbox-build", "kube-dns", 53, Y, "tenant/egress/registry-only",
         "DNS for the registry", "UDP"),
    Flow("sandbox-build", "registry", 443, Y, "tenant/egress/registry-only",
         "packages and images"),
    Flow("sandbox-internet", "kube-dns", 53, Y, "tenant/egress/internet", "DNS", "UDP"),
    Flow("sandbox-internet", "internet", 443, Y, "tenant/egress/internet", "web tasks"),
    # --- what nothing may do ---------------------------------------------------------------
    Flow("sandbox-tiny", "controller", "placement", N, "tenant/networkpolicy.yaml",
         "a sandbox steers no placements"),
    Flow("sandbox-internet", "controller", "placement", N, "tenant/networkpolicy.yaml",
         "not even with egress `internet`"),
    Flow("node-agent", "controller", "placement", N, "base/networkpolicy.yaml",
         "a node's identity steers no placements"),
    Flow("tenant-pod", "controller", "placement", N, "base/networkpolicy.yaml",
         "a tenant namespace's other pods neither"),
    Flow("trainer", "controller", "placement", N, "base/networkpolicy.yaml",
         "the placement endpoint is internal"),
    Flow("sandbox-tiny", "sandbox-build", "daemon", N, "tenant/networkpolicy.yaml",
         "another sandbox's daemon"),
    Flow("sandbox-internet", "sandbox-tiny", "daemon", N, "tenant/networkpolicy.yaml",
         "another sandbox's daemon, with egress `internet`"),
    Flow("tenant-pod", "sandbox-tiny", "daemon", N, "tenant/networkpolicy.yaml",
         "only the facade calls a daemon"),
    Flow("scraper", "sandbox-tiny", "daemon", N, "tenant/networkpolicy.yaml",
         "a daemon has no /metrics"),
    Flow("sandbox-tiny", "apiserver", 443, N, "tenant/networkpolicy.yaml",
         "no API server for sandboxes"),
    Flow("sandbox-internet", "apiserver", 443, N, "tenant/egress/internet",
         "private ranges excluded"),
    Flow("sandbox-build", "apiserver", 443, N, "tenant/egress/registry-only",
         "the registry only"),
    Flow("sandbox-internet", "metadata", 80, N, "tenant/egress/internet",
         "the cloud metadata endpoint (link-local)"),
    Flow("sandbox-tiny", "facade", "facade", N, "tenant/networkpolicy.yaml",
         "a sandbox calls no Sandman API"),
    Flow("sandbox-tiny", "kube-dns", 53, N, "tenant/networkpolicy.yaml",
         "egress `none`: not even DNS", "UDP"),
    Flow("sandbox-tiny", "internet", 443, N, "tenant/networkpolicy.yaml", "egress `none`"),
    Flow("sandbox-internet", "node-agent", "node-agent", N, "tenant/egress/internet",
         "node agents' /metrics: scrapers only"),
    Flow("tenant-pod", "node-agent", "node-agent", N, "base/networkpolicy.yaml",
         "scrapers only"),
    Flow("tenant-pod", "controller", "controller", N, "base/networkpolicy.yaml",
         "the controller's /metrics: scrapers and the facade only"),
    Flow("tenant-pod", "facade", "facade-metrics", N, "base/networkpolicy.yaml",
         "the facade's /metrics: scrapers only"),
)  # fmt: skip

#: Not network connections, so no NetworkPolicy governs them; test_network checks each
#: against the rendered workloads instead.
LOCAL = (("node-agent", "CRI ImageService", "unix socket (hostPath)", "daemon/node/app.py"),)


if __name__ == "__main__":  # the guide's table: python -m tests.support.flows
    print("| from | to | port | policy | code | why |")
    print("|---|---|---|---|---|---|")
    for flow in FLOWS:
        print(flow.row())
