"""tests/support/metrics.py: a metric read by its exported name, as a scrape reads it."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tests.support.metrics import sample


def _registry() -> tuple[CollectorRegistry, Counter, Gauge, Histogram]:
    r = CollectorRegistry()
    binds = Counter("binds", "Binds by outcome.", ["outcome"], registry=r)
    backlog = Gauge("backlog_pods", "Pods due.", registry=r)
    sizes = Histogram("batch_pods", "Pods per plan.", registry=r)
    return r, binds, backlog, sizes


def test_samples_read_by_name_and_labels() -> None:
    r, binds, backlog, sizes = _registry()
    assert sample(r, "binds_total", outcome="bound") == 0.0  # not counted yet
    binds.labels("bound").inc(3)
    backlog.set(7)
    sizes.observe(5)
    sizes.observe(2)
    assert sample(r, "binds_total", outcome="bound") == 3.0
    assert sample(r, "binds_total", outcome="conflict") == 0.0
    assert sample(r, "backlog_pods") == 7.0
    assert (sample(r, "batch_pods_sum"), sample(r, "batch_pods_count")) == (7.0, 2.0)


def test_a_name_or_labels_no_metric_exports_fail_rather_than_read_zero() -> None:
    r, binds, _, _ = _registry()
    with pytest.raises(KeyError, match="binds_totl"):
        sample(r, "binds_totl", outcome="bound")
    binds.labels("bound").inc()
    with pytest.raises(KeyError, match="labels"):
        sample(r, "binds_total", reason="bound")
