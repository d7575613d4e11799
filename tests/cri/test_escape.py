"""The escape suite: what hostile code inside a sandbox tries, on real containers.

Each test runs a tool call in a sandbox of the ``cri`` runtime (real containerd and runc,
the pod exactly as the facade renders it) that makes the system calls an exploit would —
a static probe (tests/cri/probe/escape.c) built here and uploaded with the files API, or
busybox where a shell line is the attempt — and asserts what the kernel and Sandman answer.
The table in docs/guarantees.md ("The escape suite") is this module's results, row by row.

The test bed's one difference from a cluster is the network: the simulated nodes share the
machine's network namespace (loopback only, no CNI), so a TCP connect to another sandbox's
daemon or to the controller *succeeds* here where a cluster's NetworkPolicies drop it
(held by tests/manifests/test_netpol.py). What the suite proves of those rows is the layer
behind the network: neither answers a caller without a credential.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from daemon.sandbox.layout import DAEMON_PORT, token_digest
from facade.config import load_config
from kube import PODS, ClientSettings, KubeClient
from sandman import AsyncSandman
from sandman.sdk.sandbox import AsyncSandbox
from tests.support.cri import CriHost
from tests.support.prerequisites import missing
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.bundle, pytest.mark.slow, pytest.mark.timeout(300)]
PROBE_SOURCE = Path(__file__).parent / "probe" / "escape.c"
PROBE = "/tmp/escape"
NAMESPACE = "sandman-dev"


@pytest.fixture(scope="module")
def probe_binary(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The probe, linked statically: the task image has no libc to load it with."""
    if not (gcc := shutil.which("gcc")):
        missing("gcc is not installed: the escape probe cannot be built")
    out = tmp_path_factory.mktemp("probe") / "escape"
    built = subprocess.run(
        [gcc, "-static", "-O1", "-Wall", "-Werror", "-o", str(out), str(PROBE_SOURCE)],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        missing(f"the escape probe does not build statically here: {built.stderr[-500:]}")
    return out.read_bytes()


@pytest.fixture
async def pair(cri_stack: RunningStack, cri_host: CriHost) -> AsyncIterator[list[AsyncSandbox]]:
    """Two sandboxes of one trainer, on the same node: the attacker and its neighbour."""
    owner = f"esc-{uuid.uuid4().hex[:10]}"
    async with AsyncSandman(cri_stack.url, cri_stack.token, owner=owner) as client:
        image = cri_host.task_image.reference
        attacker, neighbour = [await client.create(image) for _ in range(2)]
        try:
            yield [attacker, neighbour]
        finally:
            for sandbox in (attacker, neighbour):
                await sandbox.release_quietly()


async def _probe(sandbox: AsyncSandbox, binary: bytes, *args: str) -> dict[str, str]:
    """Run the probe with ``args``; its lines are ``<attempt> <ok|ERRNO>``."""
    await sandbox.files.write(PROBE, binary, mode=0o755)
    result = await sandbox.exec(" ".join((PROBE, *args)))
    assert result.exit_code == 0, result
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


async def _pod(stack: RunningStack, name: str) -> dict[str, Any]:
    async with await KubeClient.connect(
        ClientSettings(qps=0, burst=0), kubeconfig=str(stack.stack.kubeconfig)
    ) as kube:
        pod: dict[str, Any] = await kube.get(PODS, name, NAMESPACE)
    return pod


@pytest.mark.anyio
async def test_raw_sockets_mounts_and_new_namespaces_are_refused(
    pair: list[AsyncSandbox], probe_binary: bytes
) -> None:
    """No NET_RAW: no raw IP or packet socket to spoof neighbours with; no CAP_SYS_ADMIN
    and seccomp RuntimeDefault: no mount, no new user or mount namespace to regain them."""
    attacker, _ = pair
    assert await _probe(attacker, probe_binary, "raw") == {"raw-icmp": "EPERM", "packet": "EPERM"}
    assert await _probe(attacker, probe_binary, "mount", "/tmp") == {
        "mount-tmpfs": "EPERM",
        "mount-proc": "EPERM",
        "unshare-user": "EPERM",
        "unshare-mount": "EPERM",
    }


@pytest.mark.anyio
async def test_the_daemon_cannot_be_traced_or_read(
    pair: list[AsyncSandbox], probe_binary: bytes
) -> None:
    """The daemon (PID 1) serves the tool calls; a tool call must not attach to it, read its
    memory or its environment block."""
    attacker, _ = pair
    assert await _probe(attacker, probe_binary, "ptrace", "1") == {
        "ptrace-attach": "EPERM",
        "process-vm-readv": "EPERM",
    }


@pytest.mark.anyio
async def test_no_token_is_anywhere_in_the_sandbox(
    cri_stack: RunningStack, pair: list[AsyncSandbox]
) -> None:
    """Neither sandbox's token is in any process's environment or command line, nor in any
    file the sandbox can read; the verifier is not in any environment either."""
    minter = load_config(cri_stack.stack.settings.workdir / "facade.yaml").minter
    attacker, neighbour = pair
    patterns = "/tmp/.patterns"  # in a file: a pattern on the command line would find itself
    for sandbox in pair:
        pod = await _pod(cri_stack, sandbox.id)
        token = minter.token_of(pod)
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert token_digest(token).hex() == env["SANDMAN_TOKEN_SHA256"]  # the one searched for
        await attacker.files.write(patterns, f"{token}\nSANDMAN_TOKEN\n")
        found = await attacker.exec(
            "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done"
            f" 2>/dev/null | grep -c -F -f {patterns}"
        )
        assert found.stdout.strip() == "0", (sandbox.id, found)
        files = await attacker.exec(
            "for d in /*; do case $d in /proc|/sys|/dev) ;;"
            f" *) grep -rlsF -f {patterns} $d;; esac; done"
        )
        assert files.stdout.split() == [patterns], (sandbox.id, files)
    assert neighbour.id != attacker.id


@pytest.mark.anyio
async def test_the_neighbour_and_the_controller_refuse_a_caller_without_a_credential(
    cri_stack: RunningStack, pair: list[AsyncSandbox]
) -> None:
    """A tool call that reaches the neighbour's daemon or the controller's placement and
    claims endpoints (possible here: the nodes share loopback) is refused: 401."""
    attacker, neighbour = pair
    ip = (await _pod(cri_stack, neighbour.id))["status"]["podIP"]
    controller = cri_stack.stack.controller_url.removeprefix("http://")
    targets = {
        "neighbour's exec": f"http://{ip}:{DAEMON_PORT}/v1/exec",
        "placements": f"http://{controller}/internal/v1/placements",
        "claims": f"http://{controller}/internal/v1/claims",
    }
    for what, url in targets.items():
        sent = await attacker.exec(f"wget -q -O- --post-data='{{}}' {url} 2>&1; echo rc=$?")
        assert "401" in sent.stdout and "rc=1" in sent.stdout, (what, sent)
