"""Processes that run on nodes and inside sandboxes.

- ``daemon.sandbox``: the sandbox daemon, PID 1 of every sandbox container.
- ``daemon.node``: the node agent (DaemonSet) that prepares task images (a later issue).

Neither imports the controller or the simulated cluster (import-linter contract).
"""
