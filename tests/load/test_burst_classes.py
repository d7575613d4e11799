"""The burst's class mix and its placement census: the weighted round-robin sends each class
its share, the census's rule agrees with the scheduler's taint and selector filters (an
independent oracle), a bad classes file is a clear error, and a small burst on a pooled
cluster lands every sandbox where its class allows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from load.burst.classes import (
    BurstClass,
    ClassesError,
    class_sequence,
    load_classes,
    placement_allowed,
)
from load.burst.progress import say
from load.burst.report import write_markdown
from load.burst.run import run_burst
from load.burst.settings import BurstSettings, Thresholds
from scheduler.decoder import node_from_json, pod_from_json
from scheduler.filters import OK, node_affinity, taint_toleration

PROPS = settings(max_examples=80, deadline=None)
MIXED_CLASSES = Path(__file__).parents[2] / "load" / "burst" / "mixed-classes.yaml"


@PROPS
@given(st.lists(st.integers(1, 7), min_size=1, max_size=5))
def test_each_class_gets_its_share_spread_out(shares: list[int]) -> None:
    classes = [BurstClass({"name": f"c{i}"}, s) for i, s in enumerate(shares)]
    seq = class_sequence(classes)
    assert Counter(seq) == {f"c{i}": s for i, s in enumerate(shares)}
    # smooth: in any prefix, no class is ahead of its share by a whole request or more
    total = sum(shares)
    for n in range(1, total + 1):
        counts = Counter(seq[:n])
        assert all(abs(counts[f"c{i}"] - n * s / total) < len(shares) for i, s in enumerate(shares))


TAINTS = [
    {"key": "dedicated", "value": "highmem", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "other", "effect": "NoExecute"},
    {"key": "gpu", "value": "", "effect": "NoSchedule"},
    {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
]
TOLERATIONS = [
    {"key": "dedicated", "operator": "Equal", "value": "highmem", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Equal", "value": "highmem"},
    {"key": "dedicated", "operator": "Exists"},
    {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "gpu", "value": ""},
    {"operator": "Exists"},
    {"operator": "Exists", "effect": "NoExecute"},
]
LABELS = st.dictionaries(st.sampled_from(["node-type", "zone"]), st.sampled_from(["a", "b"]))


@PROPS
@given(
    labels=LABELS,
    taints=st.lists(st.sampled_from(TAINTS), max_size=3, unique_by=str),
    selector=LABELS,
    tolerations=st.lists(st.sampled_from(TOLERATIONS), max_size=3),
)
def test_the_census_rule_agrees_with_the_scheduler_filters(
    labels: dict[str, str],
    taints: list[dict[str, Any]],
    selector: dict[str, str],
    tolerations: list[dict[str, Any]],
) -> None:
    node = {"metadata": {"name": "n", "labels": labels}, "spec": {"taints": taints}}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if selector:
        spec["nodeSelector"] = selector
    if tolerations:
        spec["tolerations"] = tolerations
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}
    shape, info = pod_from_json(pod).shape, node_from_json(node)
    oracle = taint_toleration(shape, info) == OK and node_affinity(shape, info) == OK
    assert placement_allowed(spec, node) == oracle


def test_the_mixed_classes_file_loads() -> None:
    general, highmem = load_classes(MIXED_CLASSES)
    assert (general.name, general.share, highmem.share) == ("general", 4, 1)
    assert "share" not in highmem.entry and highmem.entry["node_selector"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{}", "a non-empty list"),
        ("[{cpu: 1}]", "entry 0 needs a name"),
        ("[{name: a, share: 0}]", "a: share must be a positive integer"),
        ("[{name: a, share: x}]", "a: share must be a positive integer"),
        ("[{name: a}, {name: a}]", "duplicate class names"),
        ("[{name: a", "while parsing"),
    ],
)
def test_bad_classes_files_are_clear_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "classes.yaml"
    path.write_text(text)
    with pytest.raises(ClassesError, match=message):
        load_classes(path)


def test_classes_need_the_facade(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs the facade"):
        BurstSettings(out=tmp_path, direct=True, classes=load_classes(MIXED_CLASSES))


POOLED = {
    "seed": 1,
    "runtime": "virtual",
    # room for all: 3 x 64 general + 2 x 32 busy slots of 250m for 120 general sandboxes
    "nodes": {"cpu": "16", "memory": "64Gi", "start_latency_s": 0.05, "lease_interval_s": 2},
    "images": {"pull_base_s": 0.05, "pull_bandwidth": "1Gi"},
    "pools": {
        "general": {"count": 3, "labels": {"node-type": "general"}},
        "highmem": {
            "count": 2,
            "memory": "256Gi",
            "labels": {"node-type": "highmem"},
            "taints": [{"key": "dedicated", "value": "highmem", "effect": "NoSchedule"}],
        },
        "busy": {"count": 2, "labels": {"node-type": "busy"}, "foreign_fraction": 0.5},
    },
    "kubeconfigs": {"kubeconfig-sandman": "sandman-system/sandman-controller"},
}


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_pooled_burst_lands_where_the_classes_allow(tmp_path: Path) -> None:
    profile = tmp_path / "pooled.yaml"
    profile.write_text(yaml.safe_dump(POOLED))
    settings = BurstSettings(
        out=tmp_path / "out",
        sandboxes=150,
        window_s=1.0,
        batch=10,
        profile=str(profile),
        classes=load_classes(MIXED_CLASSES),
        baseline_sample=0,
        ready_timeout_s=45,
        release_timeout_s=20,
        thresholds=Thresholds(min_efficiency=0.0),
    )
    result = await run_burst(settings, say)
    text = write_markdown(result, tmp_path / "report.md")
    assert result.ok, text
    placement = result.placement
    assert placement is not None and not placement.violations and not placement.unbound
    where = placement.by_class_pool
    assert sum(where.values()) == 150
    assert where["highmem", "highmem"] == 30  # every fifth batch of 10
    assert {p for c, p in where if c == "general"} <= {"general", "busy"}
    assert "| class | busy | general | highmem |" in text
