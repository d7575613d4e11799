"""The README's main command (`make demo` = `sandman-dev demo`) works: the stack comes up, the
trainer demo runs through the SDK, everything is released and stopped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.timeout(120)
def test_sandman_demo_runs_end_to_end(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "devstack", "demo", "--workdir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "episode 2 | cwd=repo EP=2" in out  # state persisted across tool calls
    assert "InvalidRequest: unknown_class" in out
    assert "0 sandboxes left" in out and out.rstrip().endswith("sandman-dev demo: done")


def test_daemon_only_demo(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "devstack", "demo", "--daemon-only"],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "session still usable" in done.stdout
