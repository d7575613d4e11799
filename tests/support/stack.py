"""The whole stack (simcluster in process mode, the controller, the facade) as real
processes, as the end-to-end tests see it through their module-scoped fixture."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest
from anyio.from_thread import BlockingPortal

from devstack.stack import Stack
from tests.support.leaks import FIXTURE_PIDS

__all__ = ["RunningStack"]


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
