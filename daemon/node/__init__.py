"""The node agent: a DaemonSet process that prepares task images on its node.

It pulls the images the controller planned for this node through the node's CRI
ImageService (gRPC over the runtime's unix socket), with bounded parallelism and retries;
publishes which images are ready in its per-node Lease; re-pulls what the kubelet's image GC
removed; removes what it pulled once it is no longer wanted; reports failures as Events and
Prometheus metrics; and, for the hostPath delivery of the sandbox daemon, keeps the daemon
bundle on the node. docs/node-agent.md is the full story; ``python -m daemon.node`` (or
``sandman-node-agent``) runs it.

Layering: it sits beside the controller and the facade (it talks to the API server through
``kube``), never imports either, and uses ``kube.light`` rather than ``KubeClient`` to stay
under its 50 MiB RSS budget. The sandbox daemon never imports it.
"""
