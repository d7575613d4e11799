"""The suite's test budgets must end a stuck test without stranding its worker, and the
watchdog behind them must end a worker that is stuck anyway (tests/support/deadlines.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = (Path(__file__).parent / "conftest.py").read_text()
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the copied conftest imports tests.support
    pytester.makeconftest(CONFTEST)
    return pytester


@pytest.mark.timeout(120)
def test_a_stuck_await_fails_alone_and_the_next_test_runs(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_inner="""
import anyio
import pytest

pytestmark = pytest.mark.anyio


@pytest.fixture
async def server():
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.sleep_forever)
        yield
        tg.cancel_scope.cancel()


@pytest.mark.timeout(4)
async def test_stuck(server):
    await anyio.Event().wait()


async def test_next(server):
    await anyio.sleep(0)
"""
    )
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", timeout=60)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["FAILED test_inner.py::test_stuck (call)", "*test body still running after 3.0 s*"]
    )


@pytest.mark.timeout(120)
def test_a_stuck_teardown_ends_the_process_with_every_stack(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_inner="""
import threading
import time

import pytest


@pytest.fixture
def stuck_teardown():
    yield
    threading.Event().wait()


@pytest.mark.timeout(2)
def test_stuck(stuck_teardown):
    time.sleep(30)
"""
    )
    result = inner.runpytest_subprocess(
        "-p", "no:cacheprovider", "-o", "watchdog_grace_s=2", timeout=60
    )
    assert result.ret == 70
    result.stderr.fnmatch_lines(
        ["*test_stuck outlived its budget; every thread's stack:*", "*in stuck_teardown*"]
    )


@pytest.mark.timeout(120)
def test_the_run_names_tests_past_half_their_budget(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_inner="""
import time

import pytest


@pytest.mark.timeout(2)
def test_slow():
    time.sleep(1.2)


@pytest.mark.timeout(20)
def test_quick():
    pass
"""
    )
    result = inner.runpytest_subprocess("-p", "no:cacheprovider", timeout=60)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*tests past half their budget*", "*s of    2 s  *test_slow"])
    result.stdout.no_fnmatch_line("*test_quick")
