"""Which processes belong to a call, so that stopping the call stops all of them.

A process group is not enough: a shell's jobs each get their own group, ``setsid`` leaves
both group and session, and a background process whose leader exited is no group anyone
signals any more. Yet the daemon must account for every process a call started: a timed-out
exec, a removed background process and a closed session must leave nothing running.

Each spawn gets a *scope*: a random id put in the child's environment as ``SANDMAN_SCOPE``
(inherited by everything it starts, ``setsid`` and double forks included), and its leader's
pid, which is also its session and group id (every child starts in a new session). A
process is a member of a scope when, among the daemon's descendants,

- its environment carries the scope's marker; or
- it carries no marker and its session or group is the leader's (a job started with a
  cleaned environment, e.g. ``env -i``); or
- it descends from a member and carries no other scope's marker.

Only the daemon's descendants are considered: the daemon is a child subreaper (or PID 1),
so every orphan of a call stays under it, and an unrelated process that happens to reuse a
pid is never touched. A pid cannot be reused while it still names a live session or group,
and a marker disagreeing with the scope rules out the rest. What escapes all three (a
process that cleared its environment, left the session *and* was orphaned) is still caught
when it was seen as a member before its parent died: ``terminate`` remembers every member
it saw, by pid and start time.

A per-call cgroup would be exact, but the cgroup file system of a Kubernetes container is
normally read-only; this works in any container, and the daemon's shutdown still kills
every descendant whatever its scope.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["SCOPE_ENV", "ProcessTable", "Scope", "kill_descendants", "scope_environment"]

SCOPE_ENV = "SANDMAN_SCOPE"
KILL_ROUNDS = 50
POLL_S = 0.02


def scope_environment(overrides: Mapping[str, str], scope_id: str) -> dict[str, str]:
    """The environment of a child in scope ``scope_id``: the daemon's, the call's, the marker."""
    return {**os.environ, **overrides, SCOPE_ENV: scope_id}


@dataclass(frozen=True, slots=True)
class _Proc:
    pid: int
    ppid: int
    pgrp: int
    session: int
    start: int  # clock ticks since boot: with the pid, an identity that survives pid reuse
    zombie: bool


def _read_stat(pid: int) -> _Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return _Proc(
        pid, int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]), fields[0] == b"Z"
    )


def _marker(pid: int) -> str | None:
    """The SANDMAN_SCOPE of a process ("" for none, None if unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return None
    prefix = SCOPE_ENV.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("ascii", "replace")
    return ""


class ProcessTable:
    """One reading of /proc: the live descendants of this process."""

    def __init__(self) -> None:
        me = os.getpid()
        procs = [p for p in map(_read_stat, _pids()) if p is not None]
        children: dict[int, list[_Proc]] = {}
        for proc in procs:
            children.setdefault(proc.ppid, []).append(proc)
        self.descendants: list[_Proc] = []  # parents before their children
        pending = list(children.get(me, []))
        while pending:
            proc = pending.pop()
            self.descendants.append(proc)
            pending.extend(children.get(proc.pid, []))

    def members(self, scope: Scope) -> list[_Proc]:
        inside: set[int] = set()
        found = []
        for proc in self.descendants:  # parents first, so `inside` knows a parent's verdict
            marker = _marker(proc.pid)
            if marker == scope.id:
                member = True
            elif marker:
                member = False  # another call's process
            else:
                in_session = scope.leader in (proc.session, proc.pgrp, proc.pid)
                member = in_session or proc.ppid in inside
            if member:
                inside.add(proc.pid)
                if not proc.zombie:
                    found.append(proc)
        return found


def _pids() -> Iterable[int]:
    return (int(entry) for entry in os.listdir("/proc") if entry.isdigit())


def _signal(procs: Iterable[_Proc], signum: int) -> None:
    for proc in procs:
        current = _read_stat(proc.pid)
        if current is None or current.start != proc.start:
            continue  # gone, or the pid now names another process
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signum)


@dataclass(slots=True)
class Scope:
    """The processes of one call: its marker and its leader (session and group id)."""

    id: str
    leader: int

    def members(self) -> list[_Proc]:
        return ProcessTable().members(self)

    def signal(self, signum: int) -> None:
        _signal(self.members(), signum)

    async def terminate(self, grace_s: float) -> None:
        """TERM every member, KILL what is left after ``grace_s``; returns when none is left.

        Members are frozen (SIGSTOP) before the KILL round, so a fork loop cannot outrun the
        scan; every member ever seen is remembered, in case it left the scope meanwhile."""
        seen = {(p.pid, p.start): p for p in self.members()}
        _signal(seen.values(), signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while loop.time() < deadline:
            current = self.members()
            seen.update({(p.pid, p.start): p for p in current})
            if not current and not _any_alive(seen.values()):
                return
            await asyncio.sleep(POLL_S)
        await self.kill(seen.values())

    async def kill(self, also: Iterable[_Proc] = ()) -> None:
        seen = {(p.pid, p.start): p for p in also}
        for _ in range(KILL_ROUNDS):
            current = self.members()
            seen.update({(p.pid, p.start): p for p in current})
            alive = [p for p in seen.values() if _still(p)]
            if not alive:
                return
            _signal(alive, signal.SIGSTOP)
            _signal(alive, signal.SIGKILL)
            await asyncio.sleep(POLL_S)


def _still(proc: _Proc) -> bool:
    current = _read_stat(proc.pid)
    return current is not None and current.start == proc.start and not current.zombie


def _any_alive(procs: Iterable[_Proc]) -> bool:
    return any(_still(p) for p in procs)


async def kill_descendants() -> None:
    """SIGKILL every descendant of the daemon, until none is left (daemon shutdown)."""
    for _ in range(KILL_ROUNDS):
        alive = [p for p in ProcessTable().descendants if not p.zombie]
        if not alive:
            return
        _signal(alive, signal.SIGSTOP)
        _signal(alive, signal.SIGKILL)
        await asyncio.sleep(POLL_S)
