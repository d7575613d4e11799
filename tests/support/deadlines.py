"""Test budgets that end a stuck test cleanly, and a last resort that ends a stuck worker.

pytest-timeout's `signal` method raises its timeout from a SIGALRM handler, wherever the main
thread happens to be. In an async test that is almost always inside the event loop's own
`select()`: the exception leaves the loop with the test's task still pending in it, and the
anyio runner that every later test of the worker shares is left half-stopped. The next
fixture teardown that awaits anything then waits forever. CI saw exactly that: one `F`, then
the worker hung until the job's 90-minute limit, with no word of which test it was.

So there are three layers here, each for what the previous one cannot do:

1. **An in-loop deadline for async tests.** The test body runs under `anyio.fail_after` with
   what is left of its pytest-timeout budget minus a margin (5 s, or a quarter of a short
   budget), so a stuck await is cancelled as an ordinary `TimeoutError` inside its own task:
   fixtures tear down normally, the traceback shows the await that was stuck, and the worker
   goes on with the next test.
2. **pytest-timeout's signal** stays, for sync tests and for setup and teardown.
3. **A watchdog per item** (a timer thread, then `faulthandler.dump_traceback` and `_exit`):
   if an item's whole protocol outlives its budget by `watchdog_grace_s` (ini, 120 s), every
   thread's stack goes to stderr and the worker process exits. xdist reports the crash, names
   the test and replaces the worker: a red run in minutes instead of a silent one that never ends.

And failures are named the moment they happen (`FAILED <nodeid>` on the terminal), because
`-n 2` otherwise shows a lone `F` until the very end, which a killed run never reaches; the
run ends with the tests that used more than half their budget.
"""

from __future__ import annotations

import faulthandler
import functools
import inspect
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import anyio
import pytest

__all__ = [
    "IN_LOOP_MARGIN_S",
    "WATCHDOG_GRACE_S",
    "RunReport",
    "pytest_addoption",
    "pytest_configure",
    "pytest_pyfunc_call",
    "pytest_runtest_makereport",
    "pytest_runtest_protocol",
    "pytest_unconfigure",
]

IN_LOOP_MARGIN_S = 5.0
WATCHDOG_GRACE_S = 120.0  # default of the `watchdog_grace_s` ini option
_STARTED = pytest.StashKey[float]()
_STDERR_FD = pytest.StashKey[int]()
_BUDGET = "budget_s"


def item_timeout_s(item: pytest.Item) -> float | None:
    """The item's pytest-timeout budget: its `timeout` marker, else the ini's `timeout`."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        value = float(marker.args[0])
    elif marker is not None and "timeout" in marker.kwargs:
        value = float(marker.kwargs["timeout"])
    else:
        value = float(item.config.getini("timeout") or 0)
    return value if value > 0 else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    item.stash[_STARTED] = time.monotonic()
    budget = item_timeout_s(item)
    if budget is None:
        return (yield)
    # A thread, not faulthandler.dump_traceback_later: pytest cancels that one whenever a test
    # phase raises (pytest_exception_interact), which is exactly before the teardown that hangs.
    grace = float(item.config.getini("watchdog_grace_s"))
    watchdog = threading.Timer(
        budget + grace, _end_worker, (item.nodeid, item.config.stash[_STDERR_FD])
    )
    watchdog.daemon = True
    watchdog.start()
    try:
        return (yield)
    finally:
        watchdog.cancel()


def _end_worker(nodeid: str, fd: int) -> None:
    os.write(fd, f"\n{nodeid} outlived its budget; every thread's stack:\n".encode())
    faulthandler.dump_traceback(file=fd, all_threads=True)
    os._exit(70)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    budget = item_timeout_s(pyfuncitem)
    original = pyfuncitem.obj
    if budget is None or not inspect.iscoroutinefunction(original):
        return (yield)
    margin = min(IN_LOOP_MARGIN_S, budget / 4)
    left = budget - (time.monotonic() - pyfuncitem.stash[_STARTED]) - margin
    pyfuncitem.obj = _within(original, max(left, 1.0), budget)
    try:
        return (yield)
    finally:
        pyfuncitem.obj = original


def _within(
    test: Callable[..., Coroutine[Any, Any, object]], seconds: float, budget: float
) -> Callable[..., Coroutine[Any, Any, object]]:
    @functools.wraps(test)
    async def bounded(*args: object, **kwargs: object) -> object:
        try:
            with anyio.fail_after(seconds):
                return await test(*args, **kwargs)
        except TimeoutError as exc:
            raise TimeoutError(
                f"test body still running after {seconds:.1f} s of its {budget:.0f} s budget "
                "(the await it was stuck in is in the traceback above)"
            ) from exc

    return bounded


class RunReport:
    """What the controller tells as the run goes: each failure the moment it arrives, and at
    the end the tests that used more than half their budget (the next ones to time out on a
    slower machine)."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        self._near: list[tuple[float, float, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        reporter = self._config.pluginmanager.get_plugin("terminalreporter")
        if report.failed and reporter is not None:
            reporter.write_line(f"FAILED {report.nodeid} ({report.when})", red=True)
        budget = dict(report.user_properties).get(_BUDGET)
        if report.when == "call" and isinstance(budget, float) and report.duration > budget / 2:
            self._near.append((report.duration, budget, report.nodeid))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self._near:
            return
        terminalreporter.section("tests past half their budget")
        for duration, budget, nodeid in sorted(self._near, reverse=True):
            terminalreporter.write_line(f"{duration:6.1f} s of {budget:4.0f} s  {nodeid}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    budget = item_timeout_s(item)
    if budget is not None:  # user_properties travel from an xdist worker to the controller
        report.user_properties.append((_BUDGET, budget))
    return report


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "watchdog_grace_s",
        "seconds past a test's timeout before its worker is ended with every thread's stack",
        default=str(WATCHDOG_GRACE_S),
    )


def pytest_configure(config: pytest.Config) -> None:
    # the terminal's stderr, kept before any test's capture points fd 2 at a temporary file
    config.stash[_STDERR_FD] = os.dup((sys.__stderr__ or sys.stderr).fileno())
    if not hasattr(config, "workerinput"):  # the xdist controller, or a run without xdist
        config.pluginmanager.register(RunReport(config), "sandman-run-report")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _STDERR_FD in config.stash:
        os.close(config.stash[_STDERR_FD])
