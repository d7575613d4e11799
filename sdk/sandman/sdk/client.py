"""``AsyncSandman``: the trainer's connection to Sandman for one run (the *owner*).

Every sandbox a client creates is labelled with its ``owner`` (the run id). Two guarantees
follow from that label:

- ``async with AsyncSandman() as client:`` renews the owner's lease in the background while
  the block runs; if the trainer dies, renewals stop and the controller collects the run's
  sandboxes one lease duration later instead of at their TTLs;
- leaving the block (normally, on an exception, or cancelled) releases every sandbox of the
  owner in one call (``release_on_exit=False`` to keep them) and stops the renewals.

Creates always carry an Idempotency-Key generated here, so a create that hit a reset
connection or a 503 is retried without risk of a second sandbox. A create's request fields
are keywords read from the request's one definition (``**spec: Unpack[CreateOptions]``,
``sandman.wire.create_request`` says why), never listed here.

The class-level annotations are the attributes a trainer may read; the blocking twin
(``sandman.sdk.blocking.client``, generated from this class) mirrors them and every public
method.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Unpack

import anyio

from sandman.wire.create_request import build_spec, with_create_options
from sandman.wire.facade import (
    DEFAULT_CLASS,
    MAX_BATCH,
    BatchResult,
    ClassInfo,
    ClassList,
    CreateBatch,
    CreateSandbox,
    LeaseRenewal,
    LeaseStatus,
    OwnerReleased,
    SandboxList,
)
from sandman.wire.facade import Sandbox as SandboxView
from sandman.wire.image_preparation import DEFAULT_PREPARE_TTL_S, ImageRequest, PrepareImages
from sandman.wire.image_preparation import Preparation as PreparationView

from .announcement import AsyncPreparation
from .create_options import CreateOptions
from .errors import SandmanError, error_for
from .sandbox import AsyncSandbox
from .settings import Limits, RetryPolicy, Timeouts, resolve_ca_file, resolve_token, resolve_url
from .transport import Transport

__all__ = ["AsyncSandman", "new_owner"]

log = logging.getLogger("sandman.sdk")


def new_owner() -> str:
    """A fresh run id (the default owner): ``run-`` and 12 hex digits."""
    return f"run-{uuid.uuid4().hex[:12]}"


class AsyncSandman:
    """The trainer's connection to Sandman for one run: ``async with`` renews the owner
    lease while the block runs and releases the run's sandboxes when it ends."""

    #: The run id every sandbox of this client is labelled with.
    owner: str
    #: The owner lease's duration; None: no lease.
    lease_s: int | None
    #: Whether closing the client releases the owner's sandboxes.
    release_on_exit: bool

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
        ca_file: str | None = None,
    ) -> None:
        """``url``/``token`` default to ``SANDMAN_URL``/``SANDMAN_TOKEN``; ``owner`` to a new
        run id; ``lease_s=None`` turns the owner lease off (sandboxes then live to their TTL
        if the trainer dies); ``ca_file`` (default ``SANDMAN_CA_FILE``): the PEM CA bundle an
        ``https://`` facade's certificate is checked against instead of the system's."""
        self.owner = owner or new_owner()
        self.lease_s = lease_s
        self.release_on_exit = release_on_exit
        url, token = resolve_url(url), resolve_token(token)
        timeouts, retry = timeouts or Timeouts(), retry or RetryPolicy()
        ca_file = resolve_ca_file(ca_file)
        self.transport = Transport(
            url, token, timeouts=timeouts, limits=limits or Limits(), retry=retry, ca_file=ca_file
        )
        #: The lease has a connection of its own: renewals must not queue behind this
        #: client's long-polls (waits on 256 sandboxes fill the pool for 20 s at a time), or
        #: the lease lapses and the facade deletes every sandbox of the owner.
        self._lease_transport = Transport(
            url,
            token,
            timeouts=timeouts,
            limits=Limits(max_connections=1),
            retry=retry,
            ca_file=ca_file,
        )
        self._lease_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<AsyncSandman {self.transport.url} owner={self.owner}>"

    async def __aenter__(self) -> AsyncSandman:
        try:
            if self.lease_s is not None:
                await self.start_lease()
        except BaseException:
            await self._close_transports()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop lease renewal, release the owner's sandboxes (if ``release_on_exit``), close."""
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + self.transport.timeouts.release_s
            try:
                await self.stop_lease()
                if self.release_on_exit:
                    await self.release_owner()
            except SandmanError as e:
                log.warning("releasing the sandboxes of %s failed: %s", self.owner, e)
            finally:
                await self._close_transports()
        if scope.cancelled_caught:
            log.warning("releasing the sandboxes of %s timed out", self.owner)

    async def _close_transports(self) -> None:
        await self._lease_transport.close()
        await self.transport.close()

    # --- create ---------------------------------------------------------------------------
    @with_create_options
    async def create(
        self,
        image: str,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        **spec: Unpack[CreateOptions],
    ) -> AsyncSandbox:
        """One sandbox of ``image``; with ``wait`` (default) it is ready when this returns.

        If waiting fails (the image cannot be pulled, the timeout passes, the caller is
        cancelled) the sandbox is released before the exception propagates; ``timeout_s``
        bounds the wait (default ``Timeouts.ready_s``). ``idempotency_key`` (default: a
        fresh one per call) makes the create safe to repeat across trainer restarts too,
        e.g. ``f"{run}-{step}-{task}"``.
        """
        body = build_spec(image, self.owner, spec)
        view = await self.transport.request(
            "POST",
            "/v1/sandboxes",
            SandboxView,
            body=body,
            headers={"Idempotency-Key": idempotency_key or uuid.uuid4().hex},
            idempotent=True,
        )
        sandbox = AsyncSandbox(self.transport, view)
        if wait:
            try:
                await sandbox.wait_ready(timeout_s)
            except BaseException:
                await sandbox.release_quietly()
                raise
        return sandbox

    @with_create_options
    async def create_many(
        self,
        n: int,
        image: str,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        group: str | None = None,
        **spec: Unpack[CreateOptions],
    ) -> list[AsyncSandbox]:
        """``n`` sandboxes from one spec: one ``POST /v1/batches`` per 5000, members that
        failed (e.g. throttled) retried with the same key, then all waited for at once.

        All or nothing: if any member cannot be created or does not become ready, every
        member is released and the first error is raised. With ``group`` (a DNS label,
        unique per step, e.g. ``f"s{step}-t{task}"``) the scheduler also places them all or
        nothing, on as few nodes as fit (one image pull per group); at most 5000.
        """
        if group is not None and n > MAX_BATCH:
            raise ValueError(f"a group has at most {MAX_BATCH} sandboxes, not {n}")
        body = build_spec(image, self.owner, spec)
        key = idempotency_key or uuid.uuid4().hex
        chunks = [(i, min(MAX_BATCH, n - i)) for i in range(0, n, MAX_BATCH)]
        sandboxes: list[AsyncSandbox] = []
        try:
            for start, count in chunks:
                views = await self._batch(body, count, f"{key}-{start}", group)
                sandboxes += [AsyncSandbox(self.transport, v) for v in views]
            if wait:
                await _wait_all(sandboxes, timeout_s, self.transport.limits.wait_concurrency)
        except BaseException:
            await _release_all(sandboxes)
            raise
        return sandboxes

    async def _batch(
        self, spec: CreateSandbox, count: int, key: str, group: str | None = None
    ) -> list[SandboxView]:
        body = CreateBatch(spec=spec, count=count, group=group)
        attempt = 0
        while True:
            attempt += 1
            result = await self.transport.request(
                "POST",
                "/v1/batches",
                BatchResult,
                body=body,
                headers={"Idempotency-Key": key},
                idempotent=True,
                # The facade creates the members before it answers: allow ~50 pods/s at worst.
                timeout_s=self.transport.timeouts.request_s + count / 50,
            )
            if not result.failed:
                return result.sandboxes
            first = result.failed[0]
            retry_after = max((f.retry_after_s or 0.0 for f in result.failed), default=0.0)
            headers = {"Retry-After": str(retry_after)} if retry_after else None
            error = error_for(first.status, first.reason, first.message, headers)
            delay = self.transport.retry_delay(attempt, error) if error.retriable else None
            if delay is None:
                raise error
            log.info("%d of %d members not created (%s); retry %d in %.2f s",
                     len(result.failed), count, first.reason, attempt, delay)  # fmt: skip
            await asyncio.sleep(delay)

    # --- prepare --------------------------------------------------------------------------
    async def prepare(
        self,
        images: Mapping[str, int] | Iterable[tuple[str, int]],
        *,
        deadline: datetime | None = None,
        ttl_s: int = DEFAULT_PREPARE_TTL_S,
        sandboxes: bool = False,
        class_: str = DEFAULT_CLASS,
        idempotency_key: str | None = None,
    ) -> AsyncPreparation:
        """Announce images ahead of a burst: image -> sandboxes expected from it (a mapping,
        or ``(image, count)`` pairs).

        The controller has enough nodes pull each image that its sandboxes start without
        waiting for a pull; ``deadline`` (timezone-aware) orders announcements, ``ttl_s``
        is how long this one counts. With ``sandboxes=True`` the sandboxes themselves are
        created ahead too, ``count`` per image of class ``class_``, earliest deadline first,
        and kept until a create of that image and class claims them or the announcement
        ends; they count against the tenant's sandbox limit. Returns at once;
        ``await prep.wait_ready(fraction)`` waits until enough is ready. Typical use:
        announce step t+1 during step t.
        """
        pairs = images.items() if isinstance(images, Mapping) else images
        body = PrepareImages(
            images=[ImageRequest(image=i, count=n) for i, n in pairs],
            deadline=deadline,
            ttl_s=ttl_s,
            owner=self.owner,
            sandboxes=sandboxes,
            sandbox_class=class_,
        )
        view = await self.transport.request(
            "POST",
            "/v1/prepare",
            PreparationView,
            body=body,
            headers={"Idempotency-Key": idempotency_key or uuid.uuid4().hex},
            idempotent=True,
        )
        return AsyncPreparation(self.transport, view)

    async def get_preparation(self, preparation_id: str) -> AsyncPreparation:
        """An earlier announcement by its id (e.g. from another process of the run)."""
        view = await self.transport.request(
            "GET", f"/v1/prepare/{preparation_id}", PreparationView, idempotent=True
        )
        return AsyncPreparation(self.transport, view)

    # --- read -----------------------------------------------------------------------------
    async def get(self, sandbox_id: str) -> AsyncSandbox:
        view = await self.transport.request(
            "GET", f"/v1/sandboxes/{sandbox_id}", SandboxView, idempotent=True
        )
        return AsyncSandbox(self.transport, view)

    async def list(
        self,
        *,
        owner: str | None = None,
        all_owners: bool = False,
        labels: dict[str, str] | None = None,
        state: str | None = None,
        page_size: int = 500,
    ) -> AsyncIterator[AsyncSandbox]:
        """This run's sandboxes (``owner=`` another run's, ``all_owners`` the tenant's),
        filtered by labels and state, fetched page by page as you iterate."""
        params: dict[str, str | list[str]] = {"limit": str(page_size)}
        if not all_owners:
            params["owner"] = owner or self.owner
        if labels:
            params["label"] = [f"{k}={v}" for k, v in labels.items()]
        if state:
            params["state"] = state
        while True:
            page = await self.transport.request(
                "GET", "/v1/sandboxes", SandboxList, params=params, idempotent=True
            )
            for view in page.items:
                yield AsyncSandbox(self.transport, view)
            if page.next is None:
                return
            params["continue"] = page.next

    async def classes(self) -> builtins.list[ClassInfo]:
        return (
            await self.transport.request("GET", "/v1/classes", ClassList, idempotent=True)
        ).items

    # --- owner ----------------------------------------------------------------------------
    async def release_owner(self, owner: str | None = None) -> int:
        """Release every sandbox of the run (one call) and drop its lease; returns how many."""
        released = await self.transport.request(
            "DELETE",
            "/v1/sandboxes",
            OwnerReleased,
            params={"owner": owner or self.owner},
            idempotent=True,
        )
        return released.released

    async def renew_lease(self, duration_s: int | None = None) -> LeaseStatus:
        body = LeaseRenewal(duration_s=duration_s or self.lease_s or 60)
        return await self._lease_transport.request(
            "PUT", f"/v1/owners/{self.owner}/lease", LeaseStatus, body=body, idempotent=True
        )

    async def start_lease(self) -> None:
        """Renew the owner lease now, then every ``lease_s / 3`` in the background."""
        if self._lease_task is not None:
            return
        await self.renew_lease()
        self._lease_task = asyncio.create_task(self._renew_forever(), name="sandman-lease")

    async def stop_lease(self) -> None:
        task, self._lease_task = self._lease_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _renew_forever(self) -> None:
        interval = (self.lease_s or 60) / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self.renew_lease()
            except SandmanError as e:
                log.warning("renewing the lease of %s failed (will keep trying): %s", self.owner, e)


async def _wait_all(
    sandboxes: Sequence[AsyncSandbox], timeout_s: float | None, concurrency: int
) -> None:
    """Wait for all to be ready (``concurrency`` long-polls at once); raise the first error."""
    limit = asyncio.Semaphore(concurrency)

    async def one(sandbox: AsyncSandbox) -> None:
        async with limit:
            await sandbox.wait_ready(timeout_s)

    results = await asyncio.gather(*(one(s) for s in sandboxes), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise errors[0]


async def _release_all(sandboxes: Sequence[AsyncSandbox]) -> None:
    await asyncio.gather(*(s.release_quietly() for s in sandboxes))
