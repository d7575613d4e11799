"""Sandman's controller: binds sandbox pods in bulk and keeps the fleet clean.

- :mod:`controller.view` — informers feeding the placement engine (:mod:`scheduler`);
- :mod:`controller.binder` — batched plans and concurrent binds;
- :mod:`controller.replace` — sandboxes rejected by the kubelet before running, placed again;
- :mod:`controller.collector`, :mod:`controller.owners` — garbage collection;
- :mod:`controller.leader` — Lease leader election;
- :mod:`controller.app`, ``python -m controller`` — the process, health and metrics.

It talks to the API server through the shared client layer (:mod:`kube`) and never imports
the facade (an import-linter contract). See docs/controller.md.
"""
