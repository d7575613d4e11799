"""Pure placement engine: capacity model, filters, scores and batch planning.

Built by issue 3. Pure by contract (see the import-linter contracts in pyproject.toml):
no I/O, no Kubernetes or HTTP client, no clock it does not receive.
"""
