"""What a client asks to run is validated before anything is spawned or any header is sent.

NUL bytes in an environment value, ``=`` in a key, NUL in ``cwd`` or ``shell`` cannot reach
``execve``: they once escaped as 500s (and as a 200 head followed by a broken body for a
streamed exec), and the session path leaked its pseudo-terminal's master fd each time. Every
such request is now a 400 with a reason, on every operation that spawns, and no error path
leaks a descriptor. The generated cases cover the class: any environment a JSON body can
carry is either refused with a reason or delivered to the command byte for byte.
"""

from __future__ import annotations

import json
import os

import aiohttp
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.daemon import DaemonProcess

pytestmark = pytest.mark.anyio

BAD_SPAWNS = [
    ({"env": {"A": "x\0y"}}, "invalid_env"),
    ({"env": {"A=B": "x"}}, "invalid_env"),
    ({"env": {"": "x"}}, "invalid_env"),
    ({"env": {"A\0": "x"}}, "invalid_env"),
    ({"cwd": "/tmp\0x"}, "invalid_cwd"),
    ({"shell": "/bin/sh\0x"}, "invalid_shell"),
]
ENDPOINTS = {
    "/v1/exec": {"command": "true"},
    "/v1/exec/stream": {"command": "true"},
    "/v1/processes": {"command": "true"},
    "/v1/sessions": {"name": "s"},
}


async def _post(session: aiohttp.ClientSession, daemon: DaemonProcess, path: str, body: object):
    headers = {"Authorization": f"Bearer {daemon.token}"}
    async with session.post(daemon.url + path, data=json.dumps(body), headers=headers) as r:
        return r.status, await r.read()


@pytest.mark.parametrize(("fields", "reason"), BAD_SPAWNS)
@pytest.mark.parametrize("path", sorted(ENDPOINTS))
async def test_unspawnable_requests_are_400s(
    daemon: DaemonProcess, path: str, fields: dict[str, object], reason: str
) -> None:
    async with aiohttp.ClientSession() as session:
        status, raw = await _post(session, daemon, path, ENDPOINTS[path] | fields)
    assert status == 400, raw
    assert json.loads(raw)["error"]["reason"] == reason


async def test_no_error_path_leaks_a_descriptor(daemon: DaemonProcess) -> None:
    daemon_proc = psutil.Process(daemon.proc.pid)
    async with aiohttp.ClientSession() as session:
        await _post(session, daemon, "/v1/exec", {"command": "true"})  # warm up
        before = daemon_proc.num_fds()
        for fields, _ in BAD_SPAWNS * 3:
            for path, body in ENDPOINTS.items():
                await _post(session, daemon, path, body | fields)
        for _ in range(5):  # spawn failures of the program itself (not of its arguments)
            await _post(session, daemon, "/v1/sessions", {"name": "s", "shell": "/no/shell"})
            await _post(session, daemon, "/v1/processes", {"argv": ["/no/such/program"]})
            await _post(session, daemon, "/v1/exec", {"argv": ["/no/such/program"]})
        assert daemon_proc.num_fds() <= before


KEYS = st.text(st.characters(codec="utf-8"), min_size=0, max_size=8)
VALUES = st.text(st.characters(codec="utf-8"), max_size=16)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(env=st.dictionaries(KEYS, VALUES, max_size=4))
async def test_any_environment_is_refused_with_a_reason_or_delivered_exactly(
    daemon: DaemonProcess, env: dict[str, str]
) -> None:
    valid = all(k and "=" not in k and "\0" not in k + v for k, v in env.items())
    async with aiohttp.ClientSession() as session:
        status, raw = await _post(session, daemon, "/v1/exec", {"argv": ["env", "-0"], "env": env})
    if not valid:
        assert (status, json.loads(raw)["error"]["reason"]) == (400, "invalid_env"), raw
        return
    assert status == 200, raw
    printed = json.loads(raw)["stdout"]["data"].split("\0")
    for key, value in env.items():
        assert f"{key}={value}" in printed
    assert os.environ.get("SANDMAN_TOKEN") is None or all(
        not line.startswith("SANDMAN_TOKEN=") for line in printed
    )
