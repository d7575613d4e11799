"""Loading profiles: YAML data files -> frozen ``ClusterSettings``.

Parsing is strict (an unknown key is a ``ProfileError`` naming it) so a typo in a latency
never silently falls back to a default. ``override`` applies command-line changes such as
``nodes.count=10`` with the same checks.

``pools`` (name -> the ``nodes`` keys that differ, plus ``count``) declares several node
shapes; the ``nodes`` section then holds what they share, and ``pools.<name>.count=10``
overrides one pool. A profile without pools is the single pool of ``nodes`` it always was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from simcluster.apiserver.http import ServerSettings
from simcluster.apiserver.rbac import AUTHORIZATION_MODES
from simcluster.cluster import ClusterSettings
from simcluster.errors import BadRequest, SimclusterError
from simcluster.kubelet.images import PullSettings
from simcluster.kubelet.settings import NodeSettings
from simcluster.pools import NodePool
from simcluster.quantity import to_units
from simcluster.scheduler.settings import SchedulerSettings

__all__ = ["ProfileError", "builtin_profiles", "load_profile", "parse_profile"]

_TOP = {
    "description",
    "seed",
    "runtime",
    "apiserver",
    "nodes",
    "images",
    "kubeconfigs",
    "namespaces",
    "cri",
    "cri_socket",
    "pools",
    "process",
    "scheduler",
}
_API = {
    "history",
    "pod_security",
    "watch_window_s",
    "bookmark_interval_s",
    "watch_timeout_s",
    "write_latency_s",
    "flowcontrol",
    "tls",
    "authorization",
}
_NODES = {
    "count", "cpu", "memory", "max_pods", "labels", "taints", "foreign_fraction", "creation_rate",
    "creation_concurrency", "start_latency_s", "start_jitter_s", "lease_interval_s",
    "status_interval_s", "preloaded_images", "restart_backoff_s", "process_count",
    "foreign_spread", "pod_pids_limit", "storage_check_interval_s", "virtual_daemon",
}  # fmt: skip
_POOL = _NODES - {"process_count"}  # the first nodes of the cluster, whatever their pool
_IMAGES = {
    "pull_base_s",
    "pull_bandwidth",
    "pull_parallelism",
    "default_size",
    "sizes",
    "size_patterns",
    "unpullable",
    "disk",
    "gc_high_percent",
    "gc_low_percent",
    "status_max_images",
}


class ProfileError(SimclusterError):
    pass


def _with_authorization(server: ServerSettings, api: Mapping[str, Any]) -> ServerSettings:
    """``apiserver.authorization`` if the profile sets it (ServerSettings holds the default)."""
    if "authorization" not in api:
        return server
    mode = str(api["authorization"])
    if mode not in AUTHORIZATION_MODES:
        raise ProfileError(
            f"apiserver.authorization: {mode!r} is not one of {', '.join(AUTHORIZATION_MODES)}"
        )
    return replace(server, authorization=mode)


def builtin_profiles() -> list[str]:
    files = resources.files("simcluster.profiles").iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


def _check(section: str, data: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ProfileError(
            f"{section}: unknown key(s) {', '.join(unknown)} "
            f"(allowed: {', '.join(sorted(allowed))})"
        )


def _flag(value: Any, key: str) -> bool:
    """A YAML boolean (``true``/``false``), refused otherwise: ``"no"`` quoted would be truthy."""
    if not isinstance(value, bool):
        raise ProfileError(f"{key}: must be true or false, not {value!r}")
    return value


def load_profile(name_or_path: str, overrides: Mapping[str, str] | None = None) -> ClusterSettings:
    """A built-in profile by name, or a YAML file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        text = path.read_text()
    elif name_or_path in builtin_profiles():
        text = resources.files("simcluster.profiles").joinpath(f"{name_or_path}.yaml").read_text()
    else:
        raise ProfileError(
            f"no profile {name_or_path!r}: built-in ones are {', '.join(builtin_profiles())}"
        )
    data = yaml.safe_load(text) or {}
    for key, value in (overrides or {}).items():
        _set(data, key, yaml.safe_load(value))
    return parse_profile(data)


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    cur = data
    for p in parents:
        cur = cur.setdefault(p, {})
        if not isinstance(cur, dict):
            raise ProfileError(f"cannot set {dotted}: {p} is not a section")
    cur[last] = value


def parse_profile(data: Mapping[str, Any]) -> ClusterSettings:
    _check("profile", data, _TOP)
    api, nodes, images = (
        data.get("apiserver") or {},
        data.get("nodes") or {},
        data.get("images") or {},
    )
    _check("apiserver", api, _API)
    _check("nodes", nodes, _NODES)
    _check("images", images, _IMAGES)
    try:
        node = _node(nodes, _pull(images))
        pools = _pools(data.get("pools"), nodes, node)
        return ClusterSettings(
            server=_server(api, int(data.get("seed", 0))),
            nodes=sum(p.count for p in pools) if pools else int(nodes.get("count", 0)),
            node=node,
            runtime=str(data.get("runtime", "virtual")),
            process_nodes=int(nodes.get("process_count", 0)),
            foreign_fraction=float(nodes.get("foreign_fraction", 0)),
            seed=int(data.get("seed", 0)),
            service_account_kubeconfigs=tuple(
                (k, str(v)) for k, v in (data.get("kubeconfigs") or {}).items()
            ),
            namespaces=tuple(str(n) for n in data.get("namespaces") or ()),
            cri=bool(data.get("cri", False)),
            cri_socket=str(data.get("cri_socket", "")),
            pools=pools,
            process_binds=_process_binds(data.get("process") or {}),
            scheduler=_scheduler(data.get("scheduler") or {}),
        )
    except (TypeError, ValueError, BadRequest) as e:
        raise ProfileError(f"invalid profile value: {e}") from e


def _process_binds(process: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``process.binds``: sandbox path -> host path, bound read-only into every pod of the
    process runtime (simcluster/kubelet/process.py)."""
    _check("process", process, {"binds"})
    binds = process.get("binds") or {}
    if not isinstance(binds, Mapping):
        raise ProfileError("process.binds must map a path in the sandbox to a host path")
    out = tuple((str(target), str(source)) for target, source in binds.items())
    for target, source in out:
        if not (target.startswith("/") and source.startswith("/")):
            raise ProfileError(f"process.binds: {target!r} -> {source!r}: both must be absolute")
    return out


def _scheduler(section: Mapping[str, Any]) -> SchedulerSettings:
    """``scheduler``: the default scheduler's settings (simcluster/scheduler/settings.py);
    a key left out keeps the dataclass's default."""
    if not isinstance(section, Mapping):
        raise ProfileError("scheduler must be a mapping of settings")
    defaults = SchedulerSettings()
    _check("scheduler", section, {f.name for f in fields(SchedulerSettings)})
    if "enabled" in section and not isinstance(section["enabled"], bool):
        raise ProfileError(f"scheduler.enabled: {section['enabled']!r} is not true or false")
    return replace(defaults, **{k: type(getattr(defaults, k))(v) for k, v in section.items()})


def _server(api: Mapping[str, Any], seed: int) -> ServerSettings:
    server = ServerSettings(
        history=int(api.get("history", 10_000)),
        watch_window_s=float(api.get("watch_window_s", 75)),
        bookmark_interval_s=float(api.get("bookmark_interval_s", 60)),
        watch_timeout_s=float(api.get("watch_timeout_s", 1800)),
        write_latency_s=float(api.get("write_latency_s", 0)),
        flowcontrol=dict(api.get("flowcontrol") or {}),
        fault_seed=seed,
        tls=bool(api.get("tls", True)),
        pod_security_exempt_runtime_classes=tuple(
            str(c) for c in (api.get("pod_security") or {}).get("exempt_runtime_classes") or ()
        ),
    )
    return _with_authorization(server, api)


def _pull(images: Mapping[str, Any]) -> PullSettings:
    return PullSettings(
        base_s=float(images.get("pull_base_s", 0)),
        bandwidth_bps=float(to_units(images.get("pull_bandwidth", 0))),
        parallelism=int(images.get("pull_parallelism", 0)),
        default_size=to_units(images.get("default_size", "100Mi")),
        sizes={k: to_units(v) for k, v in (images.get("sizes") or {}).items()},
        unpullable=tuple(images.get("unpullable", PullSettings().unpullable)),
        size_patterns={k: to_units(v) for k, v in (images.get("size_patterns") or {}).items()},
        disk_bytes=to_units(images.get("disk", 0)),
        gc_high_percent=int(images.get("gc_high_percent", 85)),
        gc_low_percent=int(images.get("gc_low_percent", 80)),
        status_max_images=int(images.get("status_max_images", 50)),
    )


def _node(nodes: Mapping[str, Any], pull: PullSettings) -> NodeSettings:
    return NodeSettings(
        cpu=str(nodes.get("cpu", "16")),
        memory=str(nodes.get("memory", "64Gi")),
        max_pods=int(nodes.get("max_pods", 110)),
        labels=dict(nodes.get("labels") or {}),
        taints=tuple(nodes.get("taints") or ()),
        creation_rate=float(nodes.get("creation_rate", 0)),
        creation_concurrency=int(nodes.get("creation_concurrency", 0)),
        start_latency_s=float(nodes.get("start_latency_s", 0)),
        start_jitter_s=float(nodes.get("start_jitter_s", 0)),
        pull=pull,
        preloaded_images=tuple(nodes.get("preloaded_images") or ()),
        lease_interval_s=float(nodes.get("lease_interval_s", 10)),
        status_interval_s=float(nodes.get("status_interval_s", 60)),
        restart_backoff_s=float(nodes.get("restart_backoff_s", 10)),
        pod_pids_limit=int(nodes.get("pod_pids_limit", NodeSettings().pod_pids_limit)),
        storage_check_interval_s=float(nodes.get("storage_check_interval_s", 10)),
        virtual_daemon=_flag(nodes.get("virtual_daemon", False), "nodes.virtual_daemon"),
    )


def _pools(entries: Any, nodes: Mapping[str, Any], shared: NodeSettings) -> tuple[NodePool, ...]:
    """Each pool is the ``nodes`` section with its own keys on top. Labels and preloaded
    images add to the shared ones (``--set nodes.preloaded_images=...`` reaches every pool);
    taints replace them (a pool says all of its taints in one place). Without pools, a
    ``foreign_spread`` makes the single pool explicit; otherwise there are none."""
    if entries is None:
        if not nodes.get("foreign_spread"):
            return ()
        entries = {"": {}}
    elif "count" in nodes:
        raise ProfileError(
            "nodes.count does not apply to a profile with pools: set pools.<name>.count"
        )
    if not isinstance(entries, Mapping) or not entries:
        raise ProfileError("pools must be a non-empty mapping of pool name -> settings")
    pools = []
    for name, entry in entries.items():
        entry = entry or {}
        if not isinstance(entry, Mapping):
            raise ProfileError(f"pools.{name}: must be a mapping of settings")
        _check(f"pools.{name}", entry, _POOL)
        merged = {
            **nodes,
            **entry,
            "labels": {**(nodes.get("labels") or {}), **(entry.get("labels") or {})},
            "preloaded_images": list(
                dict.fromkeys(
                    [*(nodes.get("preloaded_images") or ()), *(entry.get("preloaded_images") or ())]
                )
            ),
        }
        pools.append(
            NodePool(
                name=str(name),
                count=int(merged.get("count", 0)),
                node=_node(merged, shared.pull),
                foreign_fraction=float(merged.get("foreign_fraction", 0)),
                foreign_spread=float(merged.get("foreign_spread", 0)),
            )
        )
    return tuple(pools)
