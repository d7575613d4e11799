"""Load tests and benchmarks: the reference burst (``load.burst``), the locust trainer users
(``load/locustfile.py``, ``load/shapes.py``) and the component benchmarks (``load.bench``).

A development tool: no product package imports it (an import-linter contract). See
docs/load.md and BENCHMARKS.md.
"""
