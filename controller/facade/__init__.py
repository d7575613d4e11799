"""The trainer-facing HTTP facade (issue 6): thin, stateless, horizontally scalable.

Creates and deletes sandbox pods, answers reads and waits from watch caches, forwards tool
calls straight to each sandbox's daemon on the pod IP. Run it with ``python -m
controller.facade``; see docs/facade.md. This package's ``__init__`` imports nothing, so the
SDK can use :mod:`controller.facade.models` (the wire models) without the server's
dependencies.
"""
