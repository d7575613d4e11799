"""Running a real agent harness against the local stack, from the harness venv.

The harnesses (mini-swe-agent, SWE-ReX) are installed the way a trainer installs them,
``sandman[mini-swe-agent,swe-rex]`` in a virtualenv of their own (``make harness-venv``):
their dependencies (litellm and its boto3 among them) conflict with the development venv's.
So a test starts the stack in its own process and runs a script of
``tests/support/harness_scripts/`` with that venv's Python, pointed at the facade; the script
prints one JSON document, which the test checks.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["HARNESS_PYTHON", "run_harness_script"]

ROOT = Path(__file__).resolve().parents[2]
HARNESS_PYTHON = ROOT / ".venv-harnesses" / "bin" / "python"
SCRIPTS = Path(__file__).resolve().parent / "harness_scripts"


def run_harness_script(
    script: str, *args: str, url: str, token: str, workdir: Path, timeout_s: float = 60
) -> dict[str, Any]:
    """Run ``harness_scripts/<script>.py`` with ``args``; its JSON output."""
    if not HARNESS_PYTHON.exists():
        venv = HARNESS_PYTHON.parent.parent
        raise RuntimeError(f"no harness venv at {venv}: run `make harness-venv`")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "SANDMAN_URL": url,
        "SANDMAN_TOKEN": token,
        # mini-swe-agent: no banner on stdout, its global config under the test's directory.
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_GLOBAL_CONFIG_DIR": str(workdir / "mswea"),
    }
    done = subprocess.run(
        [str(HARNESS_PYTHON), "-I", str(SCRIPTS / f"{script}.py"), *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if done.returncode != 0:
        raise AssertionError(f"{script} exited {done.returncode}:\n{done.stderr[-4000:]}")
    lines = done.stdout.strip().splitlines()
    assert lines, f"{script} printed nothing; stderr:\n{done.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result
