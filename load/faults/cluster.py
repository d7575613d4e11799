"""The fault run's view of the cluster: a pod watch that keeps every pod's life (for
duplicates and leaks), simcluster's admin fault endpoint, and a sandbox daemon's process.

Why its own recorder: the burst's :class:`~load.burst.recorder.PodRecorder` keys stamps by
sandbox id, which is what a burst needs; a fault run must also see *two pods of one
sandbox* and the pod IPs (to find a daemon to kill), so this one also keeps each pod by uid.
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import yaml

from kube import KubeClient
from kube.contract import LABEL_SANDBOX
from load.burst.recorder import PodRecorder
from load.faults.outcomes import PodLife

__all__ = ["AdminFaults", "FaultRecorder", "daemon_processes"]


class FaultRecorder(PodRecorder):
    """Every sandbox pod of a namespace: stamps per sandbox, and each pod's life by uid."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        super().__init__(client, namespace, LABEL_SANDBOX)
        self.lives: dict[str, PodLife] = {}
        self.ips: dict[str, str] = {}  # sandbox id -> pod IP (the latest pod's)

    def observe(self, kind: str, pod: Mapping[str, Any]) -> None:
        super().observe(kind, pod)
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or meta.get("name"))
        sid = (meta.get("labels") or {}).get(LABEL_SANDBOX) or meta.get("name", "")
        life = self.lives.get(uid)
        if life is None:
            life = self.lives[uid] = PodLife(meta.get("name", ""), sid, self.now())
        if kind == "DELETED" and life.deleted is None:
            self.lives[uid] = PodLife(life.name, life.sandbox_id, life.seen, self.now())
        ip = (pod.get("status") or {}).get("podIP")
        if ip:
            self.ips[sid] = ip

    def live_on(self, node: str) -> list[str]:
        """Sandbox ids with a live pod bound to ``node`` now."""
        live = {life.sandbox_id for life in self.lives.values() if life.deleted is None}
        return [sid for sid, s in self.sandboxes.items() if s.node == node and sid in live]

    def busiest_node(self) -> str:
        counts: dict[str, int] = {}
        live = {life.sandbox_id for life in self.lives.values() if life.deleted is None}
        for sid, s in self.sandboxes.items():
            if s.node and sid in live:
                counts[s.node] = counts.get(s.node, 0) + 1
        return max(counts, key=lambda n: counts[n]) if counts else ""


class AdminFaults:
    """``await faults.inject(kind=..., **params)``: simcluster's ``POST /admin/faults`` with
    the admin kubeconfig (the same endpoint ``python -m simcluster fault`` uses)."""

    def __init__(self, kubeconfig: Path) -> None:
        config: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        self._url = cluster["server"].rstrip("/") + "/admin/faults"
        self._headers = {"Authorization": f"Bearer {config['users'][0]['user']['token']}"}
        ca = cluster.get("certificate-authority-data")
        self._ssl: ssl.SSLContext | bool = (
            ssl.create_default_context(cadata=base64.b64decode(ca).decode()) if ca else False
        )

    async def inject(self, **body: Any) -> dict[str, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self._url,
                json=body,
                headers=self._headers,
                ssl=self._ssl,
                timeout=aiohttp.ClientTimeout(total=30),
            ) as resp,
        ):
            answer: dict[str, Any] = await resp.json(content_type=None)
            if resp.status != 200:
                raise RuntimeError(f"fault {body} refused: HTTP {resp.status} {answer}")
            return answer


def daemon_processes(root_pid: int, ips: set[str]) -> dict[str, psutil.Process]:
    """Pod IP -> the sandbox daemon process listening there, among ``root_pid``'s
    descendants (simcluster's process runtime starts each as ``... --host <pod IP>``)."""
    out: dict[str, psutil.Process] = {}
    for proc in psutil.Process(root_pid).children(recursive=True):
        try:
            argv = proc.cmdline()
        except psutil.Error:
            continue
        if "daemon.sandbox" not in argv or "--host" not in argv:
            continue
        if argv and os.path.basename(argv[0]) == "bwrap":  # the sandbox's launcher, not it
            continue
        ip = argv[argv.index("--host") + 1] if argv.index("--host") + 1 < len(argv) else ""
        if ip in ips:
            out[ip] = proc
    return out
