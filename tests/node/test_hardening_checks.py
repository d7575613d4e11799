"""The kubelet-config checks (daemon/node/hardening.py), case by case and as properties."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from daemon.node.hardening import CHECKS, PID_LIMIT_MAX, check_kubelet_config

GOOD = {"podPidsLimit": 1024}


def test_the_kubelet_defaults_with_a_pid_limit_pass() -> None:
    assert check_kubelet_config(json.dumps(GOOD)) == {}
    assert check_kubelet_config("podPidsLimit: 1024\n") == {}  # YAML, as kubelets read it


def test_each_missing_setting_is_its_own_check() -> None:
    failed = check_kubelet_config(
        json.dumps(
            {
                "localStorageCapacityIsolation": False,
                "evictionHard": {"memory.available": "100Mi", "nodefs.inodesFree": "0%"},
            }
        )
    )
    assert set(failed) == {
        "pod_pids_limit",
        "local_storage_isolation",
        "eviction_nodefs_available",
        "eviction_nodefs_inodes",
    }
    assert set(failed) <= set(CHECKS)


def test_an_unreadable_or_odd_file_is_reported_not_raised() -> None:
    for text in (None, "[1, 2]", "{not: [yaml", ""):
        assert set(check_kubelet_config(text)) == {"readable"}


@given(st.one_of(st.integers(min_value=-(2**40), max_value=2**40), st.none(), st.text(max_size=5)))
def test_the_pid_check_fails_exactly_outside_its_range(limit: object) -> None:
    failed = check_kubelet_config(json.dumps({"podPidsLimit": limit}))
    ok = isinstance(limit, int) and 0 < limit <= PID_LIMIT_MAX
    assert ("pod_pids_limit" in failed) == (not ok)
    assert set(failed) <= {"pod_pids_limit"}


@given(
    st.dictionaries(
        st.sampled_from(["nodefs.available", "nodefs.inodesFree", "x"]),
        st.sampled_from(["", "0", "0%", "5%", "10%", "1Gi"]),
    )
)
def test_the_eviction_checks_follow_the_thresholds_given(hard: dict[str, str]) -> None:
    failed = check_kubelet_config(json.dumps(GOOD | {"evictionHard": hard}))
    for signal, check in (
        ("nodefs.available", "eviction_nodefs_available"),
        ("nodefs.inodesFree", "eviction_nodefs_inodes"),
    ):
        assert (check in failed) == (hard.get(signal, "") in ("", "0", "0%"))
