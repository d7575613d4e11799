"""A real facade in the test's own event loop, against a real API server on loopback.

``tests/facade`` runs the facade process's own ``Facade`` object (not a copy of its wiring)
with a config file written here, so validation, waits and shutdown are tested as they run in
production, without a subprocess per test.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp
import yaml

from facade.app import Facade, FacadeSettings
from facade.config import load_config
from kube import AlreadyExists, KubeClient
from kube.resources import Resource
from tests.support.kube import FAST
from tests.support.pools import install_claims_crd
from tests.support.wait import wait_until_async

__all__ = ["NAMESPACE", "NAMESPACES", "LiveFacade", "live_facade", "write_config"]

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NAMESPACE = "sandman-t1"


@dataclass(frozen=True)
class LiveFacade:
    facade: Facade
    token: str
    http: aiohttp.ClientSession  # to the facade, with the tenant's token

    @property
    def url(self) -> str:
        return self.facade.url


def write_config(
    path: Path,
    token: str,
    *,
    classes: tuple[str, ...] = ("tiny",),
    python: str | None = None,
    **tenant: object,
) -> Path:
    """A facade config with one tenant ``t1`` (namespace ``NAMESPACE``) for ``token``;
    ``python``: the daemon's interpreter as a sandbox runs it (a staged one,
    devstack/sandbox_python.py, for the process runtime), else this one."""
    delivery: dict[str, object] = {"mode": "local-process"}
    if python is not None:
        delivery["python"] = [python]
    document = {
        "secret": secrets.token_urlsafe(48),
        "delivery": delivery,
        "classes": [{"name": name} for name in classes],
        "tenants": [
            {
                "name": "t1",
                "namespace": NAMESPACE,
                "token_sha256": [hashlib.sha256(token.encode()).hexdigest()],
                "max_sandboxes": 50,
                "create_burst": 50,
                "create_rate_per_s": 1000,
                **tenant,
            }
        ],
    }
    path.write_text(yaml.safe_dump(document))
    return path


@contextlib.asynccontextmanager
async def live_facade(
    kubeconfig: Path,
    settings: FacadeSettings,
    workdir: Path,
    *,
    classes: tuple[str, ...] = ("tiny",),
    python: str | None = None,
    **tenant: object,
) -> AsyncIterator[LiveFacade]:
    """A started, synced facade (tenant namespace created) and a client session to it;
    ``classes``: the configured classes' names; ``python``: the daemon's interpreter
    (:func:`write_config`); ``tenant``: entries of the tenant's configuration beyond
    :func:`write_config`'s."""
    async with await KubeClient.connect(FAST, kubeconfig=str(kubeconfig)) as client:
        with contextlib.suppress(AlreadyExists):  # a facade started again on one cluster
            await client.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
        await install_claims_crd(client)  # the facade watches SandboxClaims (pools)
    token = secrets.token_hex(16)  # never starts with "-" (devstack/stack.py)
    path = write_config(workdir / "facade.yaml", token, classes=classes, python=python, **tenant)
    config = load_config(path)
    facade = Facade(replace(settings, kubeconfig=str(kubeconfig)), config)
    await facade.start()
    try:
        await wait_until_async(facade.ready, timeout_s=10)
        headers = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession(facade.url, headers=headers) as http:
            yield LiveFacade(facade, token, http)
    finally:
        await facade.stop()
