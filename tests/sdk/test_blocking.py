"""The generated blocking SDK drives its async twin: every member there, each one wired right.

The blocking classes are written by ``codegen.blocking`` from the async source, and
tests/test_generated.py holds the files to what it writes. What is left to check is that
the generator's rules give the blocking world the async one: every public member has its
twin (a rule that silently dropped one would go unnoticed otherwise), and the twins behave —
results wrapped in blocking objects, a method returning its own object returning the same
blocking object, iterators driven and closed, the portal stopped when the client closes —
against a scripted facade on loopback.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections import Counter
from typing import Any

import pytest

import sandman
from codegen.blocking import RENAMED, TWINS
from sandman import Files, Processes, Sandbox, Sandman, Session
from tests.support.scripted_facade import scripted_facade

SANDBOX = {"id": "sb-1", "owner": "run-x", "class": "tiny", "image": "i", "state": "ready"}
LEASE = {"owner": "run-x", "duration_s": 60, "renewed_at": "now"}


def _public(cls: type) -> set[str]:
    """The members a trainer reaches: public methods and properties, the context-manager
    dunders, and the attributes the class declares."""
    names = {n for n in vars(cls) if not n.startswith("_") or n in RENAMED}
    return names | set(inspect.get_annotations(cls))


@pytest.mark.parametrize("twin", TWINS, ids=lambda t: t.name)
def test_every_public_member_of_the_async_class_has_its_blocking_twin(twin: Any) -> None:
    async_cls = getattr(importlib.import_module(twin.module), twin.async_name)
    blocking_cls = getattr(sandman, twin.name)
    wanted = {RENAMED.get(n, n) for n in _public(async_cls)}
    assert wanted, f"{twin.async_name} has no public members: the walk is wrong"
    missing = {n for n in wanted if not hasattr(blocking_cls, n)}
    # An attribute holding an async object is set per instance (``sandbox.files``).
    missing -= {n for n in missing if n in inspect.get_annotations(async_cls)}
    # ``@async_only`` members have none by design (aiohttp's objects need the event loop).
    missing -= {n for n in missing if getattr(getattr(async_cls, n), "async_only", False)}
    assert not missing, f"{twin.name} lacks {sorted(missing)} of {twin.async_name}"


def test_the_twins_drive_their_async_methods() -> None:
    seen: Counter[str] = Counter()
    answers = {
        "PUT /v1/owners/run-x/lease": LEASE,
        "GET /v1/sandboxes/sb-1": SANDBOX,
        "DELETE /v1/sandboxes/sb-1": {**SANDBOX, "state": "releasing"},
    }
    with (
        scripted_facade(answers) as facade,
        Sandman(facade.url, "t0ken", owner="run-x", lease_s=60, release_on_exit=False) as client,
    ):
        client.stop_lease()
        client.start_lease()
        client.stop_lease()
        sandbox = client.get("sb-1")
        assert isinstance(sandbox, Sandbox) and sandbox.state == "ready"
        assert sandbox.refresh() is sandbox, "a method returning self returns the same twin"
        assert isinstance(sandbox.files, Files) and isinstance(sandbox.processes, Processes)
        assert sandbox.view.id == "sb-1" and repr(sandbox) == "<Sandbox sb-1 ready>"
        sandbox.release_quietly()
        assert (client.owner, client.lease_s, client.release_on_exit) == ("run-x", 60, False)
        seen.update(f"{r.method} {r.path}" for r in facade.seen)
    assert seen == Counter({"PUT /v1/owners/run-x/lease": 2, "GET /v1/sandboxes/sb-1": 2,
                            "DELETE /v1/sandboxes/sb-1": 1})  # fmt: skip


def test_an_iterator_is_driven_page_by_page_and_wrapped() -> None:
    pages = iter([{"items": [SANDBOX], "continue": "p2"}, {"items": [{**SANDBOX, "id": "sb-2"}]}])
    answers = {"GET /v1/sandboxes": lambda _: next(pages)}
    with (
        scripted_facade(answers) as facade,
        Sandman(facade.url, "t", owner="run-x", lease_s=None, release_on_exit=False) as client,
    ):
        listed = list(client.list())
    assert [s.id for s in listed] == ["sb-1", "sb-2"]
    assert all(isinstance(s, Sandbox) for s in listed)
    assert len(facade.requests("GET /v1/sandboxes")) == 2


def test_a_session_is_a_blocking_session_with_its_name() -> None:
    info = {"name": "agent", "shell": "/bin/sh", "pid": 7, "alive": True, "busy": False,
            "commands_run": 0, "created_at": 0.0}  # fmt: skip
    answers = {"GET /v1/sandboxes/sb-1": SANDBOX, "POST /v1/sandboxes/sb-1/sessions": info}
    with (
        scripted_facade(answers) as facade,
        Sandman(facade.url, "t", owner="run-x", lease_s=None, release_on_exit=False) as client,
    ):
        session = client.get("sb-1").session("agent")
    assert isinstance(session, Session) and session.name == "agent"
    assert len(facade.requests("POST /v1/sandboxes/sb-1/sessions")) == 1


def _new_threads(before: set[threading.Thread]) -> set[threading.Thread]:
    return set(threading.enumerate()) - before


def test_closing_the_client_stops_its_portal_and_a_second_close_is_harmless() -> None:
    with scripted_facade({}) as facade:
        before = set(threading.enumerate())
        client = Sandman(facade.url, "t", owner="run-x", lease_s=None, release_on_exit=False)
        portal = _new_threads(before)
        assert portal, "the blocking client runs its event loop in a thread of its own"
        client.close()
        assert not any(t.is_alive() for t in portal)
        client.close()


def test_a_failed_enter_stops_the_portal() -> None:
    with scripted_facade({}) as facade:  # the lease renewal is not scripted: a 404 on enter
        before = set(threading.enumerate())
        client = Sandman(facade.url, "t", owner="run-x", lease_s=60, release_on_exit=False)
        portal = _new_threads(before)
        with pytest.raises(sandman.NotFound):
            client.__enter__()
        assert portal and not any(t.is_alive() for t in portal)
