"""The sandbox daemon: PID 1 of every sandbox container, serving the agent's tool calls.

It is started from a read-only mount in an unmodified task image (see docs/daemon-bundle.md)
and reached over HTTP on the pod IP. Its API is documented in docs/daemon-api.md and, as a
machine-readable contract, in docs/openapi/daemon.json.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
