"""Is this node set up to contain a hostile sandbox? The kubelet settings the agent checks.

Why: a sandbox pod's own spec cannot bound what one tenant takes from a node — a fork bomb
exhausts the node's PIDs unless the kubelet caps each pod (``podPidsLimit``), a disk filler
fills the node's disk unless the kubelet measures ephemeral storage and evicts (local
storage capacity isolation, and hard eviction thresholds on the node's filesystem's bytes
and inodes). These are node settings an operator makes (docs/operator-guide.md, "Node
settings"), and a node without them looks healthy until the day it is not. The agent runs
on every node and can read the kubelet's configuration file (``--kubelet-config``, a
``KubeletConfiguration`` in YAML or JSON, mounted read-only); it reports each check that
fails as ``sandman_node_agent_nodes_unhardened{check}`` = 1 and in one Warning Event on its
Node (reason ``NodeNotHardened``) whenever the set of failures changes.

The checks follow the kubelet's own defaults: ``podPidsLimit`` defaults to unlimited (so it
must be set, > 0); ``localStorageCapacityIsolation`` defaults to true (so it must not be
false); ``evictionHard`` defaults to ``nodefs.available<10%``, ``nodefs.inodesFree<5%``
and ``imagefs.available<15%``, and a configuration that sets ``evictionHard`` replaces
those defaults — so a given ``evictionHard`` must name ``nodefs.available`` and
``nodefs.inodesFree`` with a non-zero threshold.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["CHECKS", "PID_LIMIT_MAX", "check_kubelet_config"]

#: Every check, in report order: name -> what it requires.
CHECKS = {
    "pod_pids_limit": "podPidsLimit set, > 0",
    "local_storage_isolation": "localStorageCapacityIsolation not false",
    "eviction_nodefs_available": "evictionHard nodefs.available non-zero (default 10%)",
    "eviction_nodefs_inodes": "evictionHard nodefs.inodesFree non-zero (default 5%)",
    "readable": "the kubelet config file readable and a KubeletConfiguration mapping",
}

#: Above this a pod may still starve the node (Linux's default pid_max is 4194304 on 64-bit,
#: but ~32768 on many distributions): reported, as upstream suggests a limit near 1024.
PID_LIMIT_MAX = 32768

_ZERO = {"", "0", "0%", "0Ki", "0Mi", "0Gi"}


def _parse(text: str) -> Mapping[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        import yaml  # only for a YAML file: the agent's RSS budget (docs/node-agent.md)

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            return None
    return data if isinstance(data, Mapping) else None


def check_kubelet_config(text: str | None) -> dict[str, str]:
    """The failed checks of a kubelet configuration (``None``: unreadable): check name ->
    what is wrong. Empty when the node has every setting."""
    config = _parse(text) if text is not None else None
    if config is None:
        return {"readable": "the kubelet config file is unreadable or not a mapping"}
    failed: dict[str, str] = {}
    pids = config.get("podPidsLimit")
    if not isinstance(pids, int) or isinstance(pids, bool) or pids <= 0:
        failed["pod_pids_limit"] = f"podPidsLimit is {pids!r}: a pod may use every PID"
    elif pids > PID_LIMIT_MAX:
        failed["pod_pids_limit"] = f"podPidsLimit is {pids}, above {PID_LIMIT_MAX}"
    if config.get("localStorageCapacityIsolation") is False:
        failed["local_storage_isolation"] = (
            "localStorageCapacityIsolation is false: ephemeral-storage limits are not enforced"
        )
    hard = config.get("evictionHard")
    if hard is not None:
        signals = hard if isinstance(hard, Mapping) else {}
        for signal, check in (
            ("nodefs.available", "eviction_nodefs_available"),
            ("nodefs.inodesFree", "eviction_nodefs_inodes"),
        ):
            value = str(signals.get(signal, "")).strip()
            if value in _ZERO:
                failed[check] = f"evictionHard sets no {signal} threshold"
    return failed
