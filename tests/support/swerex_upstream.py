"""Run SWE-ReX's own runtime-generic tests against Sandman's runtime, from SWE-ReX's checkout.

``python -m tests.support.swerex_upstream PATH/TO/SWE-ReX`` (the development venv, after
``make harness-venv``): starts the local stack, lays out a scratch copy of the checkout's
``tests/test_execution.py`` and ``tests/conftest.py`` (as ``upstream_conftest.py``) with
``harness_scripts/swerex_upstream_conftest.py`` as their ``conftest.py``, runs them with the
harness venv's pytest (pytest-asyncio installed there on first use, as SWE-ReX's own dev
extra has it) and prints the counts and every failure with its message. Nothing of SWE-ReX is
copied into this project; docs/integrations.md records the outcome.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from devstack.stack import Stack, StackSettings
from tests.support.harnesses import HARNESS_PYTHON, SCRIPTS

__all__ = ["main"]

TEST_FILES = ("test_execution.py",)


def _layout(checkout: Path, scratch: Path) -> Path:
    tests = scratch / "tests"
    tests.mkdir(parents=True)
    (tests / "__init__.py").write_text("")
    shutil.copy(checkout / "tests" / "conftest.py", tests / "upstream_conftest.py")
    shutil.copy(SCRIPTS / "swerex_upstream_conftest.py", tests / "conftest.py")
    for name in TEST_FILES:
        shutil.copy(checkout / "tests" / name, tests / name)
    (scratch / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    return tests


def _ensure_pytest() -> None:
    probe = subprocess.run([HARNESS_PYTHON, "-c", "import pytest, pytest_asyncio"], check=False)
    if probe.returncode != 0:
        pip = [HARNESS_PYTHON, "-m", "pip", "install", "-q", "pytest", "pytest-asyncio"]
        subprocess.run(pip, check=True)


def _failures(junit: Path) -> tuple[dict[str, int], list[dict[str, str]]]:
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None, f"no testsuite in {junit}"
    counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    failed = []
    for case in suite.iter("testcase"):
        for kind in ("failure", "error"):
            if (node := case.find(kind)) is not None:
                message = (node.get("message") or "").splitlines()
                failed.append({"test": case.get("name", ""), "kind": kind,
                               "message": message[0][:300] if message else ""})  # fmt: skip
    return counts, failed


async def _run(checkout: Path, workdir: Path) -> dict[str, object]:
    async with Stack(StackSettings(workdir=workdir / "stack")) as stack:
        tests = _layout(checkout, workdir / "suite")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "SANDMAN_URL": stack.url,
               "SANDMAN_TOKEN": stack.token}  # fmt: skip
        junit = workdir / "junit.xml"
        argv = [HARNESS_PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests),
                f"--junitxml={junit}", "-o", "junit_family=xunit1"]  # fmt: skip
        done = await asyncio.to_thread(
            subprocess.run, argv, cwd=tests.parent, env=env, capture_output=True, text=True
        )
        counts, failed = _failures(junit)
        return {"counts": counts, "failed": failed, "summary": done.stdout.strip().splitlines()[-1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a checkout of SWE-agent/SWE-ReX")
    args = parser.parse_args()
    _ensure_pytest()
    with tempfile.TemporaryDirectory(prefix="swerex-upstream-") as scratch:
        report = asyncio.run(_run(args.checkout.resolve(), Path(scratch)))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
