"""Cluster profiles as data: every latency and budget of a simulated cluster in one file."""

__all__: list[str] = []
