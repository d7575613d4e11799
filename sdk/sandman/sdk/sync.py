"""The blocking API: ``Sandman`` / ``Sandbox`` run the async SDK on a private event loop.

Why a portal and not a second implementation: every behaviour (retries, typed errors, lease
renewal, release on exit) lives once, in the async classes. ``Sandman`` starts an anyio
blocking portal — an event loop in a background thread — and each method is one
``portal.call`` of its async twin. The lease keeps being renewed by that loop while the
trainer's thread computes. Async iterators (``list``, ``exec_stream``) are driven one item per
call, and closed when the caller stops iterating.

Why spelled out and not generated: type checkers, IDEs and ``help()`` need real signatures.
What keeps the twin honest is tests/sdk/test_sync_twin.py, which compares every method with
its async twin (parameters, kinds, defaults, annotations, return types mapped to the
blocking world), and ``@twin_of``, which gives each method its twin's docstring — one text,
written once, on the async method.

This module holds the client and what it hands out (``Sandman``, ``Sandbox``,
``Preparation``); the portal plumbing every wrapper stands on is ``sync_portal``, and the
sandbox's bound helpers (``Session``, ``Files``, ``Processes``) are ``sync_tools``.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from types import TracebackType

from anyio.from_thread import BlockingPortal, start_blocking_portal

from sandman.wire.daemon import DaemonInfo
from sandman.wire.facade import DEFAULT_CLASS, DEFAULT_TTL_S, ClassInfo, LeaseStatus
from sandman.wire.facade import Sandbox as SandboxView
from sandman.wire.prepare import DEFAULT_PREPARE_TTL_S
from sandman.wire.prepare import Preparation as PreparationView

from .client import AsyncSandman
from .preparation import AsyncPreparation
from .results import CommandResult, StreamEvent
from .sandbox import AsyncSandbox
from .settings import Limits, RetryPolicy, Timeouts
from .sync_portal import Bound, twin_of
from .sync_tools import Files, Processes, Session

__all__ = ["Preparation", "Sandbox", "Sandman"]


class Sandbox(Bound):
    """Blocking twin of :class:`AsyncSandbox`; ``with sandbox:`` releases it on exit."""

    def __init__(self, portal: BlockingPortal, sandbox: AsyncSandbox) -> None:
        super().__init__(portal)
        self.async_sandbox = sandbox
        self.files = Files(portal, sandbox.files)
        self.processes = Processes(portal, sandbox.processes)

    def __repr__(self) -> str:
        return f"<Sandbox {self.id} {self.state}>"

    @property
    def id(self) -> str:
        return self.async_sandbox.id

    @property
    def state(self) -> str:
        return self.async_sandbox.state

    @property
    def reason(self) -> str | None:
        return self.async_sandbox.reason

    @property
    def view(self) -> SandboxView:
        return self.async_sandbox.view

    @twin_of(AsyncSandbox.refresh)
    def refresh(self) -> Sandbox:
        self._call(self.async_sandbox.refresh)
        return self

    @twin_of(AsyncSandbox.wait_ready)
    def wait_ready(self, timeout_s: float | None = None) -> Sandbox:
        self._call(self.async_sandbox.wait_ready, timeout_s)
        return self

    @twin_of(AsyncSandbox.release)
    def release(self) -> None:
        self._call(self.async_sandbox.release)

    @twin_of(AsyncSandbox.release_quietly)
    def release_quietly(self) -> None:
        self._call(self.async_sandbox.release_quietly)

    @twin_of(AsyncSandbox.__aenter__)
    def __enter__(self) -> Sandbox:
        return self

    @twin_of(AsyncSandbox.__aexit__)
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._call(self.async_sandbox.__aexit__, exc_type, exc, tb)

    @twin_of(AsyncSandbox.exec)
    def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        stdin: str | bytes | None = None,
        max_output_bytes: int | None = None,
        exec_id: str | None = None,
    ) -> CommandResult:
        return self._call(
            self.async_sandbox.exec,
            command,
            cwd=cwd,
            env=env,
            timeout_s=timeout_s,
            stdin=stdin,
            max_output_bytes=max_output_bytes,
            exec_id=exec_id,
        )

    @twin_of(AsyncSandbox.exec_stream)
    def exec_stream(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float = 60.0,
        stdin: str | bytes | None = None,
        exec_id: str | None = None,
    ) -> Iterator[StreamEvent]:
        stream = self.async_sandbox.exec_stream(
            command, cwd=cwd, env=env, timeout_s=timeout_s, stdin=stdin, exec_id=exec_id
        )
        return self._iterate(stream)

    @twin_of(AsyncSandbox.session)
    def session(
        self,
        name: str = "main",
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        shell: str | None = None,
    ) -> Session:
        session = self._call(self.async_sandbox.session, name, cwd=cwd, env=env, shell=shell)
        return Session(self._portal, session)

    @twin_of(AsyncSandbox.info)
    def info(self) -> DaemonInfo:
        return self._call(self.async_sandbox.info)


class Preparation(Bound):
    """Blocking twin of :class:`AsyncPreparation`."""

    def __init__(self, portal: BlockingPortal, preparation: AsyncPreparation) -> None:
        super().__init__(portal)
        self.async_preparation = preparation

    def __repr__(self) -> str:
        return repr(self.async_preparation).replace("<Async", "<", 1)

    @property
    def id(self) -> str:
        return self.async_preparation.id

    @property
    def view(self) -> PreparationView:
        return self.async_preparation.view

    @property
    def fraction_ready(self) -> float:
        return self.async_preparation.fraction_ready

    @twin_of(AsyncPreparation.refresh)
    def refresh(self) -> PreparationView:
        return self._call(self.async_preparation.refresh)

    @twin_of(AsyncPreparation.wait_ready)
    def wait_ready(
        self, fraction: float = 1.0, *, timeout_s: float = 600.0, poll_s: float = 1.0
    ) -> Preparation:
        self._call(self.async_preparation.wait_ready, fraction, timeout_s=timeout_s, poll_s=poll_s)
        return self


class Sandman(Bound):
    """Blocking twin of :class:`AsyncSandman` (same arguments, same semantics).

    ``with Sandman() as client:`` renews the owner lease in the background and releases the
    run's sandboxes on exit; ``close()`` does the same without a ``with`` block.
    """

    @twin_of(AsyncSandman.__init__)
    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        owner: str | None = None,
        timeouts: Timeouts | None = None,
        limits: Limits | None = None,
        retry: RetryPolicy | None = None,
        lease_s: int | None = 60,
        release_on_exit: bool = True,
    ) -> None:
        self.async_client = AsyncSandman(
            url,
            token,
            owner=owner,
            timeouts=timeouts,
            limits=limits,
            retry=retry,
            lease_s=lease_s,
            release_on_exit=release_on_exit,
        )
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = start_blocking_portal()
        super().__init__(self._portal_cm.__enter__())

    @property
    def owner(self) -> str:
        return self.async_client.owner

    @twin_of(AsyncSandman.__aenter__)
    def __enter__(self) -> Sandman:
        try:
            self._call(self.async_client.__aenter__)
        except BaseException:
            self._stop_portal()
            raise
        return self

    @twin_of(AsyncSandman.__aexit__)
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @twin_of(AsyncSandman.aclose)
    def close(self) -> None:
        if self._portal_cm is None:
            return
        try:
            self._call(self.async_client.aclose)
        finally:
            self._stop_portal()

    def _stop_portal(self) -> None:
        portal_cm, self._portal_cm = self._portal_cm, None
        if portal_cm is not None:
            portal_cm.__exit__(None, None, None)

    def _wrap(self, sandbox: AsyncSandbox) -> Sandbox:
        return Sandbox(self._portal, sandbox)

    @twin_of(AsyncSandman.create)
    def create(
        self,
        image: str,
        *,
        sandbox_class: str = DEFAULT_CLASS,
        ttl_s: int = DEFAULT_TTL_S,
        idle_timeout_s: int | None = None,
        env: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        wait: bool = True,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
    ) -> Sandbox:
        created = self._call(
            self.async_client.create,
            image,
            sandbox_class=sandbox_class,
            ttl_s=ttl_s,
            idle_timeout_s=idle_timeout_s,
            env=env,
            labels=labels,
            wait=wait,
            timeout_s=timeout_s,
            idempotency_key=idempotency_key,
        )
        return self._wrap(created)

    @twin_of(AsyncSandman.create_many)
    def create_many(
        self,
        n: int,
        image: str,
        *,
        sandbox_class: str = DEFAULT_CLASS,
        ttl_s: int = DEFAULT_TTL_S,
        idle_timeout_s: int | None = None,
        env: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        wait: bool = True,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        group: str | None = None,
    ) -> builtins.list[Sandbox]:
        created = self._call(
            self.async_client.create_many,
            n,
            image,
            sandbox_class=sandbox_class,
            ttl_s=ttl_s,
            idle_timeout_s=idle_timeout_s,
            env=env,
            labels=labels,
            wait=wait,
            timeout_s=timeout_s,
            idempotency_key=idempotency_key,
            group=group,
        )
        return [self._wrap(s) for s in created]

    @twin_of(AsyncSandman.get)
    def get(self, sandbox_id: str) -> Sandbox:
        return self._wrap(self._call(self.async_client.get, sandbox_id))

    @twin_of(AsyncSandman.list)
    def list(
        self,
        *,
        owner: str | None = None,
        all_owners: bool = False,
        labels: dict[str, str] | None = None,
        state: str | None = None,
        page_size: int = 500,
    ) -> Iterator[Sandbox]:
        pages = self.async_client.list(
            owner=owner, all_owners=all_owners, labels=labels, state=state, page_size=page_size
        )
        return (self._wrap(s) for s in self._iterate(pages))

    @twin_of(AsyncSandman.prepare)
    def prepare(
        self,
        images: Mapping[str, int],
        *,
        deadline: datetime | None = None,
        ttl_s: int = DEFAULT_PREPARE_TTL_S,
        idempotency_key: str | None = None,
    ) -> Preparation:
        announced = self._call(
            self.async_client.prepare,
            images,
            deadline=deadline,
            ttl_s=ttl_s,
            idempotency_key=idempotency_key,
        )
        return Preparation(self._portal, announced)

    @twin_of(AsyncSandman.get_preparation)
    def get_preparation(self, preparation_id: str) -> Preparation:
        return Preparation(
            self._portal, self._call(self.async_client.get_preparation, preparation_id)
        )

    @twin_of(AsyncSandman.classes)
    def classes(self) -> builtins.list[ClassInfo]:
        return self._call(self.async_client.classes)

    @twin_of(AsyncSandman.release_owner)
    def release_owner(self, owner: str | None = None) -> int:
        return self._call(self.async_client.release_owner, owner)

    @twin_of(AsyncSandman.renew_lease)
    def renew_lease(self, duration_s: int | None = None) -> LeaseStatus:
        return self._call(self.async_client.renew_lease, duration_s)

    @twin_of(AsyncSandman.start_lease)
    def start_lease(self) -> None:
        self._call(self.async_client.start_lease)

    @twin_of(AsyncSandman.stop_lease)
    def stop_lease(self) -> None:
        self._call(self.async_client.stop_lease)
