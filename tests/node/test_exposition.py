"""The node agent's hand-written metrics text, read back by prometheus_client's own parser:
the names, types, labels and values a scraper sees must be what the agent counted."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from daemon.node.exposition import Counter, Gauge, Histogram, Registry
from daemon.node.metrics import AgentMetrics


def _samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def test_every_agent_metric_parses_with_its_type() -> None:
    metrics = AgentMetrics()
    metrics.pulls.labels("ok").inc()
    metrics.pull_seconds.observe(3.0)
    families = {f.name: f.type for f in text_string_to_metric_families(metrics.render().decode())}
    assert families["sandman_node_agent_pulls"] == "counter"
    assert families["sandman_node_agent_pull_seconds"] == "histogram"
    assert families["sandman_node_agent_images_ready"] == "gauge"
    assert len(families) == len(metrics.registry.metrics)


@settings(max_examples=50, deadline=None)
@given(
    counts=st.dictionaries(
        st.text(min_size=1, max_size=8), st.integers(0, 10**6), min_size=1, max_size=5
    ),
    gauge=st.floats(allow_nan=False, allow_infinity=False, width=32),
    observations=st.lists(st.floats(0, 2000, allow_nan=False), max_size=30),
)
def test_values_read_back_as_counted(
    counts: dict[str, int], gauge: float, observations: list[float]
) -> None:
    registry = Registry()
    counter = registry.add(Counter("c", 'help with "quotes" and \\', ["reason"]))
    g = registry.add(Gauge("g", "a gauge"))
    h = registry.add(Histogram("h", "a histogram", buckets=(1, 10, 100)))
    for label, n in counts.items():
        counter.labels(label).inc(n)
    g.set(gauge)
    for value in observations:
        h.observe(value)
    samples = _samples(registry.render())
    for label, n in counts.items():
        assert samples[("c_total", (("reason", label),))] == n
    assert samples[("g", ())] == pytest.approx(gauge)
    assert samples[("h_count", ())] == len(observations)
    assert samples[("h_sum", ())] == pytest.approx(math.fsum(observations))
    for bound in (1.0, 10.0, 100.0, math.inf):
        le = "+Inf" if math.isinf(bound) else repr(bound)
        expected = sum(1 for v in observations if v <= bound)
        assert samples[("h_bucket", (("le", le),))] == expected


def test_a_counter_refuses_to_go_down_and_wrong_labels() -> None:
    counter = Counter("c", "doc", ["a"])
    with pytest.raises(ValueError, match="labels"):
        counter.labels()
    with pytest.raises(ValueError, match="only goes up"):
        Counter("d", "doc").inc(-1)
