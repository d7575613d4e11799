"""The trainer-facing HTTP facade: thin, stateless, horizontally scalable.

Creates and deletes sandbox pods, answers reads and waits from watch caches, forwards tool
calls straight to each sandbox's daemon on the pod IP. Run it with ``python -m facade`` (or
``sandman-facade``); see docs/facade.md. Its wire models live in :mod:`sandman.wire.facade`,
where the SDK decodes them; it talks to Kubernetes through :mod:`kube` and never imports the
controller (an import-linter contract).
"""
