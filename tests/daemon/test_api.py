"""The daemon's HTTP surface: auth, malformed input, limits, keep-alive."""

from __future__ import annotations

import json
import socket

import aiohttp
import pytest

from tests.support.daemon import DaemonProcess

pytestmark = pytest.mark.anyio


async def _post(
    daemon: DaemonProcess, path: str, body: bytes, token: str | None = None
) -> tuple[int, dict]:
    headers = {
        "Authorization": f"Bearer {token or daemon.token}",
        "Content-Type": "application/json",
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(daemon.url + path, data=body, headers=headers) as r,
    ):
        return r.status, json.loads(await r.read() or b"{}")


async def test_health_is_open_and_the_api_is_not(daemon: DaemonProcess) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(daemon.url + "/healthz") as r:
            assert r.status == 200
        async with session.get(daemon.url + "/v1/info") as r:
            assert r.status == 401
            assert (await r.json())["error"]["reason"] == "missing_token"
            assert r.headers["WWW-Authenticate"].startswith("Bearer")
        async with session.get(
            daemon.url + "/v1/info", headers={"Authorization": "Bearer nope"}
        ) as r:
            assert r.status == 401
            assert (await r.json())["error"]["reason"] == "invalid_token"


@pytest.mark.parametrize(
    ("path", "body", "status", "reason"),
    [
        ("/v1/exec", b"{not json", 400, "invalid_json"),
        ("/v1/exec", b'{"argv": ["true"], "typo": 1}', 400, "invalid_request"),
        ("/v1/exec", b'{"argv": "true"}', 400, "invalid_request"),
        ("/v1/exec", b'{"argv": ["true"], "command": "true"}', 400, "invalid_command"),
        ("/v1/exec", b"{}", 400, "invalid_command"),
        ("/v1/exec", b'{"argv": []}', 400, "invalid_command"),
        ("/v1/exec", b'{"argv": ["true"], "timeout_s": -1}', 400, "invalid_request"),
        (
            "/v1/exec",
            b'{"argv": ["true"], "max_output_bytes": 999999999999}',
            400,
            "output_cap_too_large",
        ),
        (
            "/v1/exec",
            b'{"argv": ["cat"], "stdin": {"data": "!!", "encoding": "base64"}}',
            400,
            "invalid_base64",
        ),
        (
            "/v1/exec",
            '{"argv": ["cat"], "stdin": {"data": "\u00e9", "encoding": "base64"}}'.encode(),
            400,
            "invalid_base64",
        ),
        (
            "/v1/files/move",
            b'{"source": "\\u00e9", "destination": "x", "encoding": "base64"}',
            400,
            "invalid_base64",
        ),
        ("/v1/exec/x-1/signal", b'{"signal": "SIGBOGUS"}', 400, "invalid_signal"),
        ("/v1/exec/x-1/signal", b'{"signal": "INT"}', 404, "exec_not_found"),
        ("/v1/nope", b"{}", 404, "no_such_endpoint"),
        ("/v1/info", b"{}", 405, "method_not_allowed"),
    ],
)
async def test_bad_requests_get_clear_errors(
    daemon: DaemonProcess, path: str, body: bytes, status: int, reason: str
) -> None:
    got_status, payload = await _post(daemon, path, body)
    assert (got_status, payload["error"]["reason"]) == (status, reason), payload


@pytest.mark.parametrize("daemon_args", [["--max-json-body-bytes", "1024"]])
async def test_oversized_json_body_is_a_413(daemon: DaemonProcess) -> None:
    body = json.dumps({"command": "true", "env": {"X": "y" * 5000}}).encode()
    status, payload = await _post(daemon, "/v1/exec", body)
    assert (status, payload["error"]["reason"]) == (413, "body_too_large")


async def test_malformed_http_gets_a_400_and_the_daemon_lives_on(daemon: DaemonProcess) -> None:
    host, port = daemon.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 400")
    async with aiohttp.ClientSession() as session, session.get(daemon.url + "/healthz") as r:
        assert r.status == 200


async def test_keep_alive_serves_many_requests_on_one_connection(daemon: DaemonProcess) -> None:
    host, port = daemon.url.removeprefix("http://").split(":")
    body = b'{"argv": ["true"]}'
    request = (
        f"POST /v1/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {daemon.token}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        reader = sock.makefile("rb")
        for _ in range(5):
            sock.sendall(request)
            assert reader.readline().startswith(b"HTTP/1.1 200")
            length = 0
            while (line := reader.readline()) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            assert json.loads(reader.read(length))["exit_code"] == 0


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"argv": ["true"], "command": "true"}', "invalid_command"),
        (b'{"argv": ["true"], "max_output_bytes": 999999999999}', "output_cap_too_large"),
        (b'{"argv": ["cat"], "stdin": {"data": "!!", "encoding": "base64"}}', "invalid_base64"),
    ],
)
async def test_bad_streaming_exec_is_a_400_not_a_broken_stream(
    daemon: DaemonProcess, body: bytes, reason: str
) -> None:
    status, payload = await _post(daemon, "/v1/exec/stream", body)
    assert (status, payload["error"]["reason"]) == (400, reason)
