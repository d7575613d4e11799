"""Scripts run by the harness venv's Python (``make harness-venv``), not by the test process:
each drives a real harness against the facade named by ``SANDMAN_URL``/``SANDMAN_TOKEN`` and
prints one JSON document of what happened (tests/support/harnesses.py runs them)."""
