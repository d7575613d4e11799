"""Sandman's component benchmarks, kept together and apart from the product packages.

Each module is a command whose output goes into BENCHMARKS.md (``make bench-<name>``):
:mod:`load.bench.scheduler` (placement), :mod:`load.bench.simcluster` (the simulated API
server), :mod:`load.bench.controller` (client cost per request and bind),
:mod:`load.bench.controller_burst` (a burst through the real controller process),
:mod:`load.bench.daemon` (tool-call latency and start-up of the sandbox daemon),
:mod:`load.bench.facade` (the facade's overhead). The reference burst is :mod:`load.burst`.
"""
