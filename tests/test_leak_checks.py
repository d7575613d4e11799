"""The suite's leak checks must actually catch leaks (they are what keeps the other tests
honest about cleaning up processes and tasks)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(120)
def test_leaked_task_and_child_process_fail_the_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the copied conftest imports tests.support
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_inner="""
import asyncio
import subprocess

import pytest


@pytest.mark.anyio
async def test_leaks_a_task():
    asyncio.ensure_future(asyncio.sleep(30))


def test_leaks_a_process():
    subprocess.Popen(["sleep", "30"])


@pytest.mark.anyio
async def test_clean():
    await asyncio.sleep(0)
"""
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-W", "ignore::ResourceWarning"
    )
    result.assert_outcomes(passed=3, errors=2)  # a failing teardown is reported as an error
    result.stdout.fnmatch_lines(["*leaked 1 asyncio task*", "*leaked 1 child process*"])
