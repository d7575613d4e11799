"""What an agent's tool call sees of the developer's machine in the embedded default.

Through the real stack (simcluster's process runtime, the controller, the facade, the SDK),
from inside a sandbox: the host's home directories and the checkout do not exist, the
effective capability set is empty, the daemon is PID 1, and no process's
``/proc/<pid>/environ`` or ``cmdline`` holds the sandbox's token, its verifier, the tenant's
token, the facade's secret or any path of the checkout — while ordinary task work (a shell,
files, the host's ``python3``) still runs. docs/simcluster.md, "What the process runtime
isolates", is the promise this holds.
"""

from __future__ import annotations

import base64
import json
import shutil

import pytest

from daemon.sandbox.layout import token_digest
from facade.tokens import TokenMinter
from sandman import AsyncSandbox, AsyncSandman
from simcluster.kubelet.bwrap import SYSTEM_PATH
from tests.support.kubectl import Kubectl
from tests.support.manifests import ROOT as CHECKOUT
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]
IMAGE = "registry.example/tasks/demo:1"
STACK = {"facade_replicas": 1, "tenants": ("dev",), "quota_pods": {}}

# Every process's environment and command line, base64 (they hold NULs), or why not.
DUMP = r"""
for d in /proc/[0-9]*; do
  for f in environ cmdline; do
    if data=$(base64 -w0 < "$d/$f" 2>/dev/null); then echo "${d#/proc/} $f $data"
    else echo "${d#/proc/} $f -"; fi
  done
done
"""


def _proc_dump(stdout: str) -> dict[tuple[int, str], bytes | None]:
    out: dict[tuple[int, str], bytes | None] = {}
    for line in stdout.splitlines():
        pid, what, data = [*line.split(" ", 2), ""][:3]
        out[int(pid), what] = None if data == "-" else base64.b64decode(data)
    return out


def _secrets(stack: RunningStack, sandbox: AsyncSandbox) -> dict[str, bytes]:
    """What must never be readable in the sandbox: its daemon token (derived as the facade
    derives it), the verifier the pod carries, the tenant's token, the facade's secret."""
    namespace = stack.stack.namespace()
    workdir = stack.stack.settings.workdir
    secret = (workdir / "facade-secret").read_bytes().strip()
    pod = json.loads(
        Kubectl(stack.stack.kubeconfig)
        .run("-n", namespace, "get", "pod", sandbox.id, "-o", "json")
        .stdout
    )
    env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}
    token = TokenMinter(secret).token_of(pod)
    assert token_digest(token).hex() == env["SANDMAN_TOKEN_SHA256"]  # the token searched for
    return {
        "daemon token": token.encode(),
        "verifier": env["SANDMAN_TOKEN_SHA256"].encode(),
        "tenant token": stack.token.encode(),
        "facade secret": secret,
        "token variable": b"SANDMAN_TOKEN",
        "checkout path": str(CHECKOUT).encode(),
        "stack workdir": str(workdir).encode(),
    }


async def test_a_tool_call_sees_nothing_of_the_host_it_should_not(
    stack: RunningStack, owner: str
) -> None:
    async with (
        AsyncSandman(stack.url, stack.token, owner=owner) as client,
        await client.create(IMAGE) as sandbox,
    ):
        assert (CHECKOUT / "pyproject.toml").exists()  # the real checkout is looked for
        paths = ["/root", "/home", str(CHECKOUT), "/etc/shadow", "/work", "/var/lib", "/run"]
        seen = await sandbox.exec(
            " ".join(f'test -e "{p}" && echo "{p}";' for p in paths)
            + ' sed -n "s/^CapEff:[[:space:]]*//p" /proc/self/status; echo "PATH=$PATH"'
        )
        assert seen.exit_code == 0, seen
        assert seen.stdout.splitlines() == ["0000000000000000", f"PATH={SYSTEM_PATH}"]

        dump = await sandbox.exec(DUMP)
        assert dump.exit_code == 0, dump
        procs = _proc_dump(dump.stdout)
        cmdline = procs[1, "cmdline"]
        assert cmdline is not None
        argv = cmdline.split(b"\0")
        assert argv[1:3] == [b"-m", b"daemon.sandbox"], argv  # the daemon itself is PID 1
        assert {pid for pid, _ in procs} >= {1}
        for name, secret in _secrets(stack, sandbox).items():
            leaks = [key for key, data in procs.items() if data and secret in data]
            assert not leaks, f"the {name} is readable in {leaks}"

        # Ordinary task work still runs: a shell, files written and read, the host's python3.
        work = await sandbox.exec("cd /tmp && echo hi > note.txt && cat note.txt && pwd")
        assert (work.exit_code, work.stdout) == (0, "hi\n/tmp\n"), work
        await sandbox.files.write("/tmp/solve.py", "print(6 * 7)\n")
        assert await sandbox.files.read("/tmp/solve.py") == b"print(6 * 7)\n"
        if shutil.which("python3", path="/usr/bin:/bin"):
            ran = await sandbox.exec("python3 /tmp/solve.py")
            assert (ran.exit_code, ran.stdout) == (0, "42\n"), ran
