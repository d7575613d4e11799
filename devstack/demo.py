"""``sandman-dev demo``: one sandbox daemon as a real local process, driven like an agent would.

Shows the tool-call surface end to end (exec, a persistent session with an interrupted command,
files, a background process, resource info) and prints what happened at each step.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile

from devstack.launcher import start_local_daemon
from sandman.sdk.daemon_client import SandboxClient

__all__ = ["run_demo"]


def _say(step: str, detail: str) -> None:
    print(f"  {step:<28} {detail}", flush=True)


async def _steps(client: SandboxClient, workdir: str) -> None:
    result = await client.exec(command="uname -sm; id -un")
    _say(
        "exec",
        f"exit {result.exit_code} in {result.duration_s * 1000:.1f} ms: "
        f"{result.stdout.data.strip()!r}",
    )
    await client.create_session("agent")
    await client.run_in_session("agent", "mkdir -p repo && cd repo && export TASK=demo")
    where = await client.run_in_session("agent", "pwd; echo task=$TASK")
    _say("session keeps state", where.output.data.strip().replace("\n", " | "))
    hung = await client.run_in_session("agent", "sleep 30", timeout_s=1)
    _say("session timeout", f"timed_out={hung.timed_out} exit={hung.exit_code} (Ctrl-C sent)")
    after = await client.run_in_session("agent", "echo still in $(basename $PWD)")
    _say("session still usable", after.output.data.strip())
    await client.write_file(f"{workdir}/repo/hello.py", b"print('hello from the sandbox')\n")
    ran = await client.run_in_session("agent", "python3 hello.py 2>/dev/null || cat hello.py")
    _say("file write + run", ran.output.data.strip())
    proc = await client.start_process(command="for i in 1 2 3; do echo tick $i; sleep 0.2; done")
    done = await client.wait_process(proc.id, timeout_s=10)
    tail = await client.process_output(proc.id)
    _say("background process", f"exit {done.exit_code}, output {tail.stdout.data.split()!r}")
    await client.close_session("agent")
    info = await client.info()
    _say(
        "daemon info",
        f"pid {info.pid}, RSS {info.usage.daemon_rss_bytes / 2**20:.1f} MiB, "
        f"cgroup v{info.limits.cgroup_version}",
    )


async def run_demo(keep_workdir: bool = False) -> int:
    token = secrets.token_hex(24)  # never starts with "-" (devstack/stack.py)
    workdir = tempfile.mkdtemp(prefix="sandman-demo-")
    print(f"sandman-dev demo: starting a sandbox daemon in {workdir}", flush=True)
    daemon = start_local_daemon(workdir, token=token)
    _say("daemon listening", f"{daemon.url} after {daemon.startup_s * 1000:.0f} ms")
    try:
        async with SandboxClient(daemon.url, token) as client:
            await _steps(client, workdir)
    finally:
        code = daemon.stop(15)
        _say("daemon stopped", f"exit code {code} after SIGTERM")
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    print("sandman-dev demo: done", flush=True)
    return 0 if code == 0 else 1
