"""Suite-wide test policy: asyncio via the anyio plugin, and no leaks.

Every test is checked for two kinds of leak, because both hide real bugs in a system made of
long-running processes:

- asyncio tasks still pending when an async test ends (a background task nobody awaited);
- child processes (or zombies) of the test process that outlive the test.

Every test has a budget (pytest-timeout's, 60 s unless marked) that ends it cleanly, and a
watchdog behind it that ends a stuck worker loudly (tests/support/deadlines.py).

The daemon bundle is a session fixture here because two packages need it (tests/daemon runs
it in a bubblewrap rootfs, tests/cri in containerd) and its build takes 15-40 s: once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest
from hypothesis import settings as hypothesis_settings

from daemon.sandbox import bundle
from devstack.rootfs import RootfsError, find_busybox_static, find_bwrap
from tests.support.deadlines import (  # noqa: F401 (hooks, found by name)
    pytest_addoption,
    pytest_configure,
    pytest_pyfunc_call,
    pytest_runtest_makereport,
    pytest_runtest_protocol,
    pytest_unconfigure,
)
from tests.support.leaks import FIXTURE_PIDS
from tests.support.wait import WaitTimeout, wait_until, wait_until_async

# CI draws the same examples every run (a red CI must mean a change broke something); locally
# every run explores new ones. `HYPOTHESIS_PROFILE=dev` in CI to explore there too.
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
hypothesis_settings.register_profile("dev", print_blob=True)
hypothesis_settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")
)

LEAK_GRACE_S = 3.0


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The daemon bundle (the real build behind `make bundle`), built once per session."""
    try:
        find_bwrap()
        find_busybox_static()
    except RootfsError as exc:
        pytest.fail(str(exc))
    root = tmp_path_factory.mktemp("bundle")
    out = root / "daemon-bundle"
    bundle.build(out, work=root / "work")
    return out


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("anyio") and isinstance(item, pytest.Function):
            item.fixturenames.insert(0, "_no_leaked_tasks")


@pytest.fixture
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = set(asyncio.all_tasks())
    yield

    def pending() -> list[asyncio.Task[object]]:
        current = asyncio.current_task()
        return [
            t
            for t in asyncio.all_tasks() - before
            if t is not current and not t.done() and not _is_runner_task(t)
        ]

    with contextlib.suppress(WaitTimeout):  # a grace to finish; what is left after it leaked
        await wait_until_async(lambda: not pending(), timeout_s=LEAK_GRACE_S)
    leaked = pending()
    for task in leaked:
        task.cancel()
    if leaked:
        pytest.fail(f"test leaked {len(leaked)} asyncio task(s): {leaked!r}")


def _is_runner_task(task: asyncio.Task[object]) -> bool:
    """The anyio test runner wraps each fixture/test step in a task of its own."""
    return "TestRunner" in getattr(task.get_coro(), "__qualname__", "")


def _children() -> dict[int, str]:
    out: dict[int, str] = {}
    for child in psutil.Process().children(recursive=True):
        try:
            out[child.pid] = " ".join(child.cmdline()) or child.name()
        except psutil.Error:
            out[child.pid] = "?"
    return out


def _fixture_owned(config: pytest.Config) -> set[int]:
    owned: set[int] = set()
    for pid in config.stash.get(FIXTURE_PIDS, set()):
        try:
            owned |= {pid} | {c.pid for c in psutil.Process(pid).children(recursive=True)}
        except psutil.Error:
            pass
    return owned


@pytest.fixture(autouse=True)
def _no_leaked_processes(pytestconfig: pytest.Config) -> Iterator[None]:
    before = set(_children())
    yield

    def alive() -> dict[int, str]:
        exempt = before | _fixture_owned(pytestconfig)
        return {pid: cmd for pid, cmd in _children().items() if pid not in exempt}

    with contextlib.suppress(WaitTimeout):  # a grace to exit; what is left after it leaked
        wait_until(lambda: not alive(), timeout_s=LEAK_GRACE_S, interval_s=0.05)
    leaked = alive()
    for pid in leaked:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, os.WNOHANG)
        except (ProcessLookupError, ChildProcessError):
            pass
    if leaked:
        pytest.fail(f"test leaked {len(leaked)} child process(es): {leaked}")
