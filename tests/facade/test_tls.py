"""The facade serving its API over TLS (facade/tls.py): the SDK reaches it with the
operator's CA bundle, a plain-HTTP or untrusting client does not, and a rotated certificate
is served to new connections without a restart."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from facade.app import FacadeSettings
from sandman import AsyncSandman
from sandman.sdk.errors import ConnectionFailed
from sandman.sdk.settings import RetryPolicy
from simcluster.apiserver.tls import ServingCerts
from simcluster.embedded import EmbeddedCluster
from tests.support.facade import LiveFacade, live_facade
from tests.support.kube import FAST

pytestmark = [pytest.mark.timeout(60)]
ONCE = RetryPolicy(attempts=1)


def _write(certs: ServingCerts, where: Path) -> tuple[Path, Path, Path]:
    ca, cert, key = where / "ca.pem", where / "tls.crt", where / "tls.key"
    ca.write_bytes(certs.ca_pem)
    cert.write_bytes(certs.cert_pem)
    key.write_bytes(certs.key_pem)
    return ca, cert, key


@pytest.fixture
async def tls_facade(cluster: EmbeddedCluster, tmp_path: Path) -> AsyncIterator[LiveFacade]:
    _, cert, key = _write(ServingCerts.generate(), tmp_path)
    settings = FacadeSettings(port=0, client=FAST, tls_cert_file=str(cert), tls_key_file=str(key))
    async with live_facade(cluster.kubeconfig, settings, tmp_path) as running:
        yield running


@pytest.mark.anyio
async def test_the_sdk_reaches_a_tls_facade_with_its_ca_and_nothing_else_does(
    tls_facade: LiveFacade, tmp_path: Path
) -> None:
    url = tls_facade.facade.url
    assert url.startswith("https://")
    ca = tmp_path / "ca.pem"
    async with AsyncSandman(url, tls_facade.token, ca_file=str(ca), lease_s=None) as sdk:
        assert [c.name for c in await sdk.classes()] == ["tiny"]
    untrusting = AsyncSandman(url, tls_facade.token, retry=ONCE, lease_s=None)
    async with untrusting:
        with pytest.raises(ConnectionFailed):
            await untrusting.classes()
    plain = url.replace("https://", "http://")
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientError):
            async with http.get(f"{plain}/v1/classes") as r:
                await r.read()


@pytest.mark.anyio
async def test_a_rotated_certificate_is_served_to_new_connections(
    tls_facade: LiveFacade, tmp_path: Path
) -> None:
    tls, url, token = tls_facade.facade.tls, tls_facade.facade.url, tls_facade.token
    assert tls is not None and not tls.reload_if_changed()
    old_ca = tmp_path / "old-ca.pem"
    (tmp_path / "ca.pem").rename(old_ca)
    rotated = tmp_path / "rotated"
    rotated.mkdir()
    new_ca, new_cert, new_key = _write(ServingCerts.generate(), rotated)
    Path(tls.cert_file).write_bytes(new_cert.read_bytes())
    Path(tls.key_file).write_bytes(new_key.read_bytes())
    os.utime(tls.cert_file, (1, 1))  # a distinct mtime even on a coarse clock
    assert tls.reload_if_changed()
    async with AsyncSandman(url, token, ca_file=str(new_ca), lease_s=None) as sdk:
        assert [c.name for c in await sdk.classes()] == ["tiny"]
    async with AsyncSandman(url, token, ca_file=str(old_ca), retry=ONCE, lease_s=None) as sdk:
        with pytest.raises(ConnectionFailed):
            await sdk.classes()
    # A rotation caught midway: a third certificate, its key not yet written.
    Path(tls.cert_file).write_bytes(ServingCerts.generate().cert_pem)
    Path(tls.key_file).write_text("half-written")
    os.utime(tls.key_file, (2, 2))
    assert not tls.reload_if_changed()
    async with AsyncSandman(url, token, ca_file=str(new_ca), lease_s=None) as sdk:
        assert [c.name for c in await sdk.classes()] == ["tiny"]  # the loaded pair stays


def test_the_tls_bench_runs_and_prints_its_table() -> None:
    """``python -m load.bench.tls`` (docs/benchmarks/hardening.md) at its smallest."""
    out = subprocess.run(
        [sys.executable, "-m", "load.bench.tls", "--rounds", "1", "--requests", "5"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    rows = [line for line in out.splitlines() if line.startswith("| exec") or "new conn" in line]
    assert len(rows) == 2, out
    for row in rows:
        plain, tls = (float(cell) for cell in row.split("|")[2:4])
        assert plain > 0 and tls > 0, row
    assert "libssl + libcrypto" in out
