"""The whole stack (simcluster in process mode, the controller, the facade) as real
processes, as the end-to-end tests see it through their module-scoped fixture.

:func:`running_stack` is that fixture's body, one for every package that starts a stack
(tests/e2e, tests/cri, tests/manifests): the stack lives on a blocking portal's event loop,
so its loop and child processes are not mistaken for a test's leaks, and it is entered as
the context manager it is, so a start that fails half-way stops what it had started."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from devstack.stack import Stack, StackSettings
from tests.support.leaks import FIXTURE_PIDS

__all__ = ["RunningStack", "running_stack"]


@dataclass(frozen=True)
class RunningStack:
    """What tests need of a :class:`Stack` that lives on the portal's event loop."""

    stack: Stack
    portal: BlockingPortal
    config: pytest.Config

    @property
    def url(self) -> str:
        return self.stack.url

    @property
    def urls(self) -> list[str]:
        return self.stack.urls

    @property
    def token(self) -> str:
        return self.stack.token

    @property
    def tokens(self) -> dict[str, str]:
        return self.stack.tokens

    async def restart(self, name: str) -> None:
        await anyio.to_thread.run_sync(self.portal.call, self.stack.restart, name)
        owned = self.config.stash.setdefault(FIXTURE_PIDS, set())
        owned.add(self.stack.processes[name].pid)

    async def start_again(self, name: str) -> None:
        await anyio.to_thread.run_sync(self.portal.call, self.stack.start_again, name)
        owned = self.config.stash.setdefault(FIXTURE_PIDS, set())
        owned.add(self.stack.processes[name].pid)

    async def kill(self, name: str) -> int:
        code: int = await anyio.to_thread.run_sync(self.portal.call, self.stack.kill, name)
        return code

    def send_signal(self, name: str, sig: int) -> None:
        self.stack.send_signal(name, sig)

    async def leader(self) -> str:
        name: str = await anyio.to_thread.run_sync(self.portal.call, self.stack.leader)
        return name


@contextmanager
def running_stack(settings: StackSettings, config: pytest.Config) -> Iterator[RunningStack]:
    """A started :class:`Stack` for the block, stopped at its end (or when it fails to start)."""
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Stack(settings)) as stack,
    ):
        yield RunningStack(stack, portal, config)
