"""The suite's waiting helper (tests/support/wait.py): it returns what the condition found,
retries only "not yet", and a timeout says what was awaited and what was last seen."""

from __future__ import annotations

import asyncio
import time

import anyio
import anyio.lowlevel
import pytest

from tests.support.wait import WaitTimeout, describe, wait_until, wait_until_async


class Countdown:
    """Falsy for ``n`` calls, then the value; records how often it was called."""

    def __init__(self, n: int, value: object = "done") -> None:
        self.n, self.value, self.calls = n, value, 0

    def __call__(self) -> object:
        self.calls += 1
        return self.value if self.calls > self.n else None


def test_returns_the_first_truthy_value() -> None:
    countdown = Countdown(3, value={"phase": "Running"})
    assert wait_until(countdown, interval_s=0.001) == {"phase": "Running"}
    assert countdown.calls == 4


def test_assertion_errors_mean_not_yet_other_errors_propagate() -> None:
    calls = []

    def condition() -> bool:
        calls.append(1)
        assert len(calls) >= 3, "fewer than 3 calls"
        return True

    assert wait_until(condition, interval_s=0.001) is True
    assert len(calls) == 3

    def broken() -> bool:
        calls.append(1)
        raise KeyError("bug")

    calls.clear()
    with pytest.raises(KeyError):
        wait_until(broken, timeout_s=5)
    assert len(calls) == 1  # not retried: a bug is not "not yet"
    attempts = iter([ConnectionRefusedError(), ConnectionRefusedError(), "up"])

    def starting() -> object:
        outcome = next(attempts)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert wait_until(starting, interval_s=0.001, retry=(ConnectionError,)) == "up"


def test_timeout_names_the_condition_and_the_last_value() -> None:
    values = iter(range(1000))
    started = time.monotonic()
    with pytest.raises(WaitTimeout) as timeout:
        wait_until(lambda: next(values) > 10**6, timeout_s=0.2, interval_s=0.01)
    elapsed = time.monotonic() - started
    assert 0.2 <= elapsed < 2
    message = str(timeout.value)
    assert isinstance(timeout.value, AssertionError)
    assert "lambda: next(values) > 10**6" in message
    assert "test_wait.py:" in message
    assert "timeout 0.2 s" in message and "checks" in message
    assert "it last returned False" in message
    assert timeout.value.last is False


def test_timeout_reports_the_last_assertion_and_chains_it() -> None:
    def ready() -> bool:
        state = "pending"
        assert state == "ready", f"sandbox is {state}"
        return True

    last = r"ready\(\).*it last raised AssertionError: sandbox is pending"
    with pytest.raises(WaitTimeout, match=last) as e:
        wait_until(ready, timeout_s=0.05, interval_s=0.01)
    assert isinstance(e.value.__cause__, AssertionError)
    with pytest.raises(WaitTimeout, match="waiting for the pod to be Ready; it last returned 0"):
        wait_until(lambda: 0, timeout_s=0, what="the pod to be Ready")


def test_checks_once_more_at_the_deadline() -> None:
    """A zero timeout still checks once; a condition true only at the deadline is seen."""
    assert wait_until(lambda: "now", timeout_s=0) == "now"
    started = time.monotonic()
    deadline = started + 0.1
    assert wait_until(lambda: time.monotonic() >= deadline, timeout_s=0.1, interval_s=1.0)
    assert time.monotonic() - started < 0.5  # the last pause is cut short at the deadline


def test_sync_variant_refuses_an_async_condition() -> None:
    async def ready() -> bool:
        return True

    with pytest.raises(TypeError, match="wait_until_async"):
        wait_until(ready)  # an un-awaited coroutine is truthy: it must not count as "true"


def test_the_description_of_a_lambda_among_others_on_its_line() -> None:
    a, b = (lambda: 1 == 2), (lambda: "second" in "a second lambda")
    assert describe(a).startswith("lambda: 1 == 2 (")
    assert describe(b).startswith('lambda: "second" in "a second lambda" (')
    assert describe(Countdown(1)).startswith("<tests.test_wait.Countdown object")
    named = describe(test_checks_once_more_at_the_deadline)
    assert named.startswith("test_checks_once_more_at_the_deadline() (")
    assert "test_wait.py:" in named


@pytest.mark.anyio
async def test_async_variant_awaits_conditions_and_lets_the_loop_run() -> None:
    flag = asyncio.Event()

    async def set_later() -> None:
        await anyio.sleep(0.05)
        flag.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(set_later)
        assert await wait_until_async(flag.is_set, interval_s=0.005) is True  # plain callable
    calls = []

    async def listed() -> list[str]:
        calls.append(1)
        await anyio.lowlevel.checkpoint()
        return ["sb-1"] if len(calls) > 2 else []

    assert await wait_until_async(listed, interval_s=0.001) == ["sb-1"]
    assert await wait_until_async(lambda: listed(), interval_s=0.001) == ["sb-1"]


@pytest.mark.anyio
async def test_async_timeout_and_a_hung_check() -> None:
    async def never() -> bool:
        await anyio.lowlevel.checkpoint()
        return False

    with pytest.raises(WaitTimeout, match=r"never\(\).*it last returned False"):
        await wait_until_async(never, timeout_s=0.05, interval_s=0.01)

    async def hangs() -> bool:
        await anyio.sleep_forever()
        return True

    started = time.monotonic()
    with pytest.raises(WaitTimeout, match=r"one check did not finish within 1\.0 s"):
        await wait_until_async(hangs, timeout_s=0.1)
    assert time.monotonic() - started < 3  # bounded by the grace, not the test's timeout


def test_async_variant_under_plain_asyncio() -> None:
    async def main() -> str:
        return await wait_until_async(Countdown(2, "asyncio"), interval_s=0.001)  # type: ignore[no-any-return]

    assert asyncio.run(main()) == "asyncio"
