"""``python -m load.bench.admission`` runs and measures what it says: the shipped sandbox pod
passes ``restricted``, the stripped one is the same pod without its hardening."""

from __future__ import annotations

from load.bench.admission import hardened_pod, run, stripped
from simcluster.apiserver.podsecurity import LevelVersion, evaluate


def test_the_stripped_pod_is_the_hardened_one_without_its_security_settings() -> None:
    pod = hardened_pod(0)
    plain = stripped(pod)
    assert not evaluate(LevelVersion("restricted"), pod)
    assert evaluate(LevelVersion("restricted"), plain)  # what the hardening is for
    assert not evaluate(LevelVersion("baseline"), plain)
    assert plain["metadata"] == pod["metadata"]
    assert [c["image"] for c in plain["spec"]["containers"]] == ["registry.example/task:1"]


def test_the_bench_reports_per_pod_figures_and_the_reference_burst() -> None:
    report = run(pods=20, rounds=1)
    assert report["pod_bytes"]["hardened"] > report["pod_bytes"]["stripped"]
    assert all(v > 0 for v in report["per_pod_us"].values())
    burst = report["reference_burst"]
    assert burst["extra_bytes"] == 11_858 * (
        report["pod_bytes"]["hardened"] - report["pod_bytes"]["stripped"]
    )
