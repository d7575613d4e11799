"""The node agent's shutdown rule (daemon/node/app.py ``run_until_signalled``), which
``python -m daemon.node`` and ``python -m devstack.agents`` share: SIGTERM or SIGINT cancels
the work, its ``finally`` blocks run, and the process exits 0; work that ends by itself exits
0 too, and an exception of the work is not swallowed. Each case is a real process."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(30)

SCRIPT = """
import asyncio, sys
from daemon.node.app import run_until_signalled

async def work(mode):
    print("started", flush=True)
    try:
        if mode == "forever":
            await asyncio.Event().wait()
        if mode == "fails":
            raise RuntimeError("the work failed")
    finally:
        print("cleaned up", flush=True)

sys.exit(asyncio.run(run_until_signalled(work(sys.argv[1]))))
"""


def start(mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "started\n"  # the handlers are installed by now
    return proc


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    """Exit code, the rest of stdout, stderr (read through the pipes' buffers, which
    ``communicate`` would bypass)."""
    with proc:
        assert proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout.read(), proc.stderr.read()
        return proc.wait(timeout=10), out, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_cancels_the_work_which_cleans_up_and_exits_0(sig: int) -> None:
    proc = start("forever")
    proc.send_signal(sig)
    code, out, err = finish(proc)
    assert (code, out) == (0, "cleaned up\n"), err


def test_work_that_ends_exits_0_and_a_failure_propagates() -> None:
    code, out, err = finish(start("ends"))
    assert (code, out) == (0, "cleaned up\n"), err
    code, out, err = finish(start("fails"))
    assert (code, out) == (1, "cleaned up\n")
    assert "RuntimeError: the work failed" in err
