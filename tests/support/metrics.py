"""A process's Prometheus metrics read in tests as a scrape reads them: one sample by its
exported name and labels, through the registry's public API.

prometheus_client keeps a metric's values in private attributes (``_value``, ``_sum``);
reading those ties a test to the library's internals, and to a Python attribute rather than
to the name an operator's alert uses. :func:`sample` asks the registry
(``CollectorRegistry.get_sample_value``) instead, and refuses a name no metric of the
registry exports, so a misspelt name fails rather than reading 0.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

__all__ = ["sample"]

#: What prometheus_client appends to a family's name in its samples.
_SUFFIXES = ("", "_total", "_created", "_sum", "_count", "_bucket")


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """The value of ``name{labels}``; 0.0 while a labelled metric has no child with those
    labels yet (a counter that has not counted). KeyError for a name no metric exports, or
    labels other than the metric's."""
    value = registry.get_sample_value(name, labels)
    if value is not None:
        return value
    for family in registry.collect():
        if not any(name == family.name + suffix for suffix in _SUFFIXES):
            continue
        label_sets = {frozenset(s.labels) for s in family.samples if s.name == name}
        if label_sets and frozenset(labels) not in label_sets:
            raise KeyError(f"{name} has labels {sorted(next(iter(label_sets)))}, not {labels}")
        return 0.0
    raise KeyError(f"no metric of the registry exports {name!r}")
