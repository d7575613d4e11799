"""The fault benchmark (``python -m load.faults``): each fault injected into a burst created
through the SDK, reported as sandboxes lost, duplicated, leaked, failed with a typed reason,
and time to detect (definitions: ``load.faults.outcomes``; guarantees: docs/guarantees.md)."""
