"""The blocking SDK is the async SDK's exact twin: same methods, signatures and docstrings.

``sandman.sdk.sync`` spells its signatures out (so type checkers, IDEs and ``help()`` see
them) and drives the async classes through a portal. Nothing but this test stops the two
from drifting apart, so it compares every public method (and the context-manager dunders)
of each pair with ``inspect.signature``: the same parameters in the same order, of the same
kinds, with the same defaults and annotations; the return annotation the same once the
async world is mapped onto the blocking one (``AsyncSandbox`` -> ``Sandbox``,
``AsyncIterator[T]`` -> ``Iterator[T]``; a coroutine's value is returned as is); and the
same docstring. A failure names the method and the difference.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import functools
import inspect
import operator
import threading
import types
import typing
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from sandman.sdk import (
    AsyncFiles,
    AsyncPreparation,
    AsyncProcesses,
    AsyncSandbox,
    AsyncSandman,
    AsyncSession,
    Files,
    Preparation,
    Processes,
    Sandbox,
    Sandman,
    Session,
)

TWINS: dict[type, type] = {
    AsyncSandman: Sandman,
    AsyncSandbox: Sandbox,
    AsyncSession: Session,
    AsyncFiles: Files,
    AsyncProcesses: Processes,
    AsyncPreparation: Preparation,
}
#: Async name -> blocking name where the protocols differ.
RENAMED = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}
#: Dunders compared besides the public names (``__init__`` only where both take the same
#: arguments: the other blocking classes are built from a portal and their async twin).
DUNDERS = ("__aenter__", "__aexit__")
SAME_CONSTRUCTOR = (AsyncSandman,)


def _members(cls: type) -> dict[str, Any]:
    """Public methods and properties defined by ``cls`` (or a base of the SDK's own)."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__[:-1]):
        for name, value in vars(klass).items():
            public = not name.startswith("_") or name in DUNDERS or name in RENAMED.values()
            if public and (callable(value) or isinstance(value, property)):
                found[name] = value
    if cls in SAME_CONSTRUCTOR or (cls in TWINS.values() and _async_of(cls) in SAME_CONSTRUCTOR):
        found["__init__"] = vars(cls)["__init__"]
    return found


def _async_of(sync_cls: type) -> type:
    return next(a for a, s in TWINS.items() if s is sync_cls)


def _to_blocking(annotation: Any) -> Any:
    """The blocking world's spelling of an async-world type."""
    if isinstance(annotation, type) and annotation in TWINS:
        return TWINS[annotation]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is None or not args:
        return annotation
    mapped = tuple(_to_blocking(a) for a in args)
    if origin in (types.UnionType, typing.Union):
        return functools.reduce(operator.or_, mapped)
    if origin in (collections.abc.AsyncIterator, collections.abc.AsyncGenerator):
        return collections.abc.Iterator[mapped[0]]  # type: ignore[valid-type]
    if origin is collections.abc.Awaitable or origin is collections.abc.Coroutine:
        return mapped[-1]
    return origin[mapped]


def _doc(fn: Any) -> str | None:
    """The method's own docstring (``inspect.getdoc`` would inherit ``object``'s)."""
    return inspect.cleandoc(fn.__doc__) if fn.__doc__ else None


def _signature(fn: Any) -> inspect.Signature:
    return inspect.signature(fn, eval_str=True)


def _differences(async_fn: Any, sync_fn: Any) -> list[str]:
    if isinstance(async_fn, property) or isinstance(sync_fn, property):
        return _property_differences(async_fn, sync_fn)
    a, s = _signature(async_fn), _signature(sync_fn)
    problems: list[str] = []
    a_params, s_params = list(a.parameters.values()), list(s.parameters.values())
    if [p.name for p in a_params] != [p.name for p in s_params]:
        problems.append(
            f"parameters {[p.name for p in s_params]} != async {[p.name for p in a_params]}"
        )
    for ap, sp in zip(a_params, s_params, strict=False):
        for what in ("kind", "default", "annotation"):
            mine, theirs = getattr(sp, what), getattr(ap, what)
            if what == "annotation":
                theirs = _to_blocking(theirs)
            if mine != theirs:
                problems.append(f"parameter {sp.name!r}: {what} {mine!r} != async {theirs!r}")
    expected_return = _to_blocking(a.return_annotation)
    if s.return_annotation != expected_return:
        problems.append(f"returns {s.return_annotation!r}, async maps to {expected_return!r}")
    if _doc(sync_fn) != _doc(async_fn):
        problems.append(f"docstring {_doc(sync_fn)!r} != async {_doc(async_fn)!r}")
    return problems


def _property_differences(async_attr: Any, sync_attr: Any) -> list[str]:
    if not (isinstance(async_attr, property) and isinstance(sync_attr, property)):
        return [f"a property on one side only ({async_attr!r} vs {sync_attr!r})"]
    a = _signature(async_attr.fget).return_annotation
    s = _signature(sync_attr.fget).return_annotation
    problems = [] if s == _to_blocking(a) else [f"property type {s!r} != async {a!r}"]
    if _doc(sync_attr) != _doc(async_attr):
        problems.append(f"docstring {_doc(sync_attr)!r} != async {_doc(async_attr)!r}")
    return problems


PAIRS = [pytest.param(a, s, id=f"{s.__name__}/{a.__name__}") for a, s in TWINS.items()]


@pytest.mark.parametrize(("async_cls", "sync_cls"), PAIRS)
def test_the_blocking_twin_has_every_method_of_the_async_class(
    async_cls: type, sync_cls: type
) -> None:
    async_names = {RENAMED.get(n, n) for n in _members(async_cls)}
    sync_names = set(_members(sync_cls))
    missing, extra = async_names - sync_names, sync_names - async_names
    # A blocking property may stand for a plain attribute of the async object (``owner``).
    extra = {n for n in extra if not isinstance(_members(sync_cls)[n], property)}
    assert not missing, f"{sync_cls.__name__} lacks {sorted(missing)} of {async_cls.__name__}"
    assert not extra, f"{sync_cls.__name__} has {sorted(extra)} that {async_cls.__name__} lacks"


@pytest.mark.parametrize(("async_cls", "sync_cls"), PAIRS)
def test_each_method_matches_its_async_twin(async_cls: type, sync_cls: type) -> None:
    sync_members = _members(sync_cls)
    drift: list[str] = []
    for name, async_fn in sorted(_members(async_cls).items()):
        sync_name = RENAMED.get(name, name)
        if sync_name in sync_members:
            for problem in _differences(async_fn, sync_members[sync_name]):
                drift.append(f"{sync_cls.__name__}.{sync_name} vs {name}: {problem}")
    assert not drift, "the blocking SDK drifted from the async one:\n" + "\n".join(drift)


def test_the_mapping_reads_the_async_world_right() -> None:
    """The comparison itself: a wrong mapping would let every drift through."""
    async_list = _signature(AsyncSandman.list).return_annotation
    assert _to_blocking(async_list) == collections.abc.Iterator[Sandbox]
    assert _to_blocking(AsyncSandbox | None) == (Sandbox | None)
    assert _to_blocking(list[AsyncSandbox]) == list[Sandbox]
    assert _to_blocking(str) is str


@contextlib.contextmanager
def _facade_in_a_thread(answers: dict[str, Any], seen: Counter[str]) -> Iterator[str]:
    """A scripted facade on 127.0.0.1, on a loop of its own (the blocking client blocks)."""

    async def handle(request: web.Request) -> web.Response:
        key = f"{request.method} {request.path}"
        seen[key] += 1
        return web.json_response(answers[key])

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_the_twins_added_for_parity_drive_their_async_methods() -> None:
    """``start_lease``/``stop_lease``/``release_quietly`` were missing from the blocking SDK."""
    sandbox = {"id": "sb-1", "owner": "run-x", "class": "tiny", "image": "i", "state": "ready"}
    answers = {
        "PUT /v1/owners/run-x/lease": {"owner": "run-x", "duration_s": 60, "renewed_at": "now"},
        "GET /v1/sandboxes/sb-1": sandbox,
        "DELETE /v1/sandboxes/sb-1": {**sandbox, "state": "releasing"},
    }
    seen: Counter[str] = Counter()
    with (
        _facade_in_a_thread(answers, seen) as url,
        Sandman(url, "t0ken", owner="run-x", lease_s=60, release_on_exit=False) as client,
    ):
        client.stop_lease()
        client.start_lease()
        client.stop_lease()
        client.get("sb-1").release_quietly()
    assert seen == Counter({"PUT /v1/owners/run-x/lease": 2, "GET /v1/sandboxes/sb-1": 1,
                            "DELETE /v1/sandboxes/sb-1": 1})  # fmt: skip
