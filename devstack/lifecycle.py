"""``async with`` for what the devstack starts: ``start()``, and ``stop()`` also when the
start fails half-way.

Why a base class: a start that fails half-way has already started processes — containerd
up and the registry not, simcluster and a controller up and the facade not — and only
``stop()`` knows them; a caller's ``async with`` never reaches ``__aexit__`` when
``__aenter__`` raised, so the stop belongs in ``__aenter__`` itself. :class:`Stack
<devstack.stack.Stack>` and :class:`ContainerdHost <devstack.containerd.ContainerdHost>` each
wrote this; here it is once, and each ``stop()`` must accept a half-done start.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self

__all__ = ["StartStop"]


class StartStop(ABC):
    """``async with thing:`` runs :meth:`start`, then :meth:`stop` at the block's end or when
    the start raised (before the exception goes on)."""

    @abstractmethod
    async def start(self) -> None:
        """Start everything; may raise part-way."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop what is running, whatever :meth:`start` got to; idempotent."""

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.stop()
