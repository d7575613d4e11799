# Generated from sandman/sdk/client.py by `make generate` (codegen): do not edit.
"""The blocking twin of :mod:`sandman.sdk.client`: Sandman.

Each method is one call of its async twin through the portal
(:mod:`sandman.sdk.blocking.portal`); generated from the async source by ``codegen.blocking``.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from types import TracebackType
from typing import Unpack

from sandman.sdk.blocking.announcement import Preparation
from sandman.sdk.blocking.portal import PortalOwner
from sandman.sdk.blocking.sandbox import Sandbox
from sandman.sdk.client import AsyncSandman
from sandman.sdk.create_options import CreateOptions
from sandman.sdk.settings import Limits, RetryPolicy, Timeouts
from sandman.wire.create_request import with_create_options
from sandman.wire.facade import DEFAULT_CLASS, ClassInfo, LeaseStatus
from sandman.wire.image_preparation import DEFAULT_PREPARE_TTL_S

__all__ = ["Sandman"]


class Sandman(PortalOwner[AsyncSandman]):
    """Blocking twin of :class:`sandman.sdk.client.AsyncSandman`.

    The trainer's connection to Sandman for one run: ``async with`` renews the owner
    lease while the block runs and releases the run's sandboxes when it ends."""

    @property
    def async_client(self) -> AsyncSandman:
        """The async object this one drives."""
        return self._async

    @property
    def owner(self) -> str:
        """The run id every sandbox of this client is labelled with."""
        return self._async.owner

    @property
    def lease_s(self) -> int | None:
        """The owner lease's duration; None: no lease."""
        return self._async.lease_s

    @property
    def release_on_exit(self) -> bool:
        """Whether closing the client releases the owner's sandboxes."""
        return self._async.release_on_exit

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
        super().__init__(
            AsyncSandman(
                url,
                token,
                owner=owner,
                timeouts=timeouts,
                limits=limits,
                retry=retry,
                lease_s=lease_s,
                release_on_exit=release_on_exit,
                ca_file=ca_file,
            )
        )

    def __repr__(self) -> str:
        return repr(self._async).replace("<Async", "<", 1)

    def __enter__(self) -> Sandman:
        return self._wrap(Sandman, self._enter(lambda: self._async.__aenter__()))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finish(lambda: self._async.__aexit__(exc_type, exc, tb))

    def close(self) -> None:
        """Stop lease renewal, release the owner's sandboxes (if ``release_on_exit``), close."""
        self._finish(lambda: self._async.aclose())

    @with_create_options
    def create(
        self,
        image: str,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        **spec: Unpack[CreateOptions],
    ) -> Sandbox:
        """One sandbox of ``image``; with ``wait`` (default) it is ready when this returns.

        If waiting fails (the image cannot be pulled, the timeout passes, the caller is
        cancelled) the sandbox is released before the exception propagates; ``timeout_s``
        bounds the wait (default ``Timeouts.ready_s``). ``idempotency_key`` (default: a
        fresh one per call) makes the create safe to repeat across trainer restarts too,
        e.g. ``f"{run}-{step}-{task}"``."""
        return self._wrap(
            Sandbox,
            self._call(
                lambda: self._async.create(
                    image, wait=wait, timeout_s=timeout_s, idempotency_key=idempotency_key, **spec
                )
            ),
        )

    @with_create_options
    def create_many(
        self,
        n: int,
        image: str,
        *,
        wait: bool = True,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        group: str | None = None,
        **spec: Unpack[CreateOptions],
    ) -> list[Sandbox]:
        """``n`` sandboxes from one spec: one ``POST /v1/batches`` per 5000, members that
        failed (e.g. throttled) retried with the same key, then all waited for at once.

        All or nothing: if any member cannot be created or does not become ready, every
        member is released and the first error is raised. With ``group`` (a DNS label,
        unique per step, e.g. ``f"s{step}-t{task}"``) the scheduler also places them all or
        nothing, on as few nodes as fit (one image pull per group); at most 5000."""
        return [
            self._wrap(Sandbox, x)
            for x in self._call(
                lambda: self._async.create_many(
                    n,
                    image,
                    wait=wait,
                    timeout_s=timeout_s,
                    idempotency_key=idempotency_key,
                    group=group,
                    **spec,
                )
            )
        ]

    def prepare(
        self,
        images: Mapping[str, int] | Iterable[tuple[str, int]],
        *,
        deadline: datetime | None = None,
        ttl_s: int = DEFAULT_PREPARE_TTL_S,
        sandboxes: bool = False,
        class_: str = DEFAULT_CLASS,
        idempotency_key: str | None = None,
    ) -> Preparation:
        """Announce images ahead of a burst: image -> sandboxes expected from it (a mapping,
        or ``(image, count)`` pairs).

        The controller has enough nodes pull each image that its sandboxes start without
        waiting for a pull; ``deadline`` (timezone-aware) orders announcements, ``ttl_s``
        is how long this one counts. With ``sandboxes=True`` the sandboxes themselves are
        created ahead too, ``count`` per image of class ``class_``, earliest deadline first,
        and kept until a create of that image and class claims them or the announcement
        ends; they count against the tenant's sandbox limit. Returns at once;
        ``await prep.wait_ready(fraction)`` waits until enough is ready. Typical use:
        announce step t+1 during step t."""
        return self._wrap(
            Preparation,
            self._call(
                lambda: self._async.prepare(
                    images,
                    deadline=deadline,
                    ttl_s=ttl_s,
                    sandboxes=sandboxes,
                    class_=class_,
                    idempotency_key=idempotency_key,
                )
            ),
        )

    def get_preparation(self, preparation_id: str) -> Preparation:
        """An earlier announcement by its id (e.g. from another process of the run)."""
        return self._wrap(
            Preparation, self._call(lambda: self._async.get_preparation(preparation_id))
        )

    def get(self, sandbox_id: str) -> Sandbox:
        return self._wrap(Sandbox, self._call(lambda: self._async.get(sandbox_id)))

    def list(
        self,
        *,
        owner: str | None = None,
        all_owners: bool = False,
        labels: dict[str, str] | None = None,
        state: str | None = None,
        page_size: int = 500,
    ) -> Iterator[Sandbox]:
        """This run's sandboxes (``owner=`` another run's, ``all_owners`` the tenant's),
        filtered by labels and state, fetched page by page as you iterate."""
        return (
            self._wrap(Sandbox, x)
            for x in self._iterate(
                self._async.list(
                    owner=owner,
                    all_owners=all_owners,
                    labels=labels,
                    state=state,
                    page_size=page_size,
                )
            )
        )

    def classes(self) -> builtins.list[ClassInfo]:
        return self._call(lambda: self._async.classes())

    def release_owner(self, owner: str | None = None) -> int:
        """Release every sandbox of the run (one call) and drop its lease; returns how many."""
        return self._call(lambda: self._async.release_owner(owner))

    def renew_lease(self, duration_s: int | None = None) -> LeaseStatus:
        return self._call(lambda: self._async.renew_lease(duration_s))

    def start_lease(self) -> None:
        """Renew the owner lease now, then every ``lease_s / 3`` in the background."""
        self._call(lambda: self._async.start_lease())

    def stop_lease(self) -> None:
        self._call(lambda: self._async.stop_lease())
