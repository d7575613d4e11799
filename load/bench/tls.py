"""What TLS costs a tool call's hop, on this machine: ``python -m load.bench.tls``.

Why this benchmark exists: the operator guide's TLS decision (docs/operator-guide.md, "TLS")
rests on two numbers — what TLS adds per request on a kept-alive connection (every tool call
pays it on each hop that has it) and per new connection (the handshake: once per trainer
connection, or once per sandbox on the facade -> daemon hop) — and on what it would add to
the daemon bundle, which today carries no libssl (docs/daemon-bundle.md).

How: an aiohttp server in a process of its own (the facade's server stack) answers
``POST /echo`` with a body of the asked size, over plain HTTP and over TLS 1.3 (ECDSA P-256,
the certificate simcluster generates) on loopback; an aiohttp client (the SDK's) sends
requests of a tool call's typical sizes in interleaved rounds (plain, TLS, plain, ...) so
the machine's noise hits both alike; medians per round, then the median over rounds, and the
TLS/plain ratio within each round. The bundle's share: the sizes of ``_ssl``, libssl and
libcrypto as this Python loads them, and ``import ssl``'s time in a fresh interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from load.burst.progress import say
from simcluster.apiserver.tls import ServingCerts

#: (label, request bytes, response bytes): a small exec, a file read, a 64 KiB write.
SIZES = (("exec: 200 B -> 1 KiB", 200, 1024), ("read: 200 B -> 64 KiB", 200, 65536),
         ("write: 64 KiB -> 100 B", 65536, 100))  # fmt: skip


def _serve(port_file: Path, cert: Path | None, key: Path | None) -> None:
    """The server process: answers POST /echo?n=N with N bytes."""

    async def echo(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"x" * int(request.query["n"]))

    async def main() -> None:
        app = web.Application(client_max_size=1 << 20)
        app.router.add_post("/echo", echo)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        context = None
        if cert is not None and key is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert, key)
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port_file.write_text(str(runner.addresses[0][1]))
        await asyncio.Event().wait()

    asyncio.run(main())


async def _round(url: str, context: ssl.SSLContext | bool, requests: int) -> dict[str, float]:
    """Median ms per request of each size on one kept-alive connection, and the median ms
    of a request on a fresh connection (the handshake included)."""
    out: dict[str, float] = {}
    connector = aiohttp.TCPConnector(limit=1, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as http:
        for label, sent, answered in SIZES:
            body, times = b"y" * sent, []
            for _ in range(requests):
                t0 = time.perf_counter()
                async with http.post(f"{url}/echo?n={answered}", data=body) as r:
                    await r.read()
                times.append((time.perf_counter() - t0) * 1000)
            out[label] = statistics.median(times)
    fresh = []
    for _ in range(max(10, requests // 10)):
        t0 = time.perf_counter()
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http,
            http.post(f"{url}/echo?n=100", data=b"y") as r,
        ):
            await r.read()
        fresh.append((time.perf_counter() - t0) * 1000)
    out["new connection + 1 request"] = statistics.median(fresh)
    return out


def _start(
    workdir: Path, name: str, tls: tuple[Path, Path] | None
) -> tuple[subprocess.Popen[bytes], str]:
    port_file = workdir / f"{name}.port"
    args = [sys.executable, "-m", "load.bench.tls", "--serve", str(port_file)]
    if tls is not None:
        args += ["--cert", str(tls[0]), "--key", str(tls[1])]
    proc = subprocess.Popen(args)
    deadline = time.monotonic() + 20
    while not (port_file.exists() and port_file.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the {name} server did not start")
        time.sleep(0.05)
    scheme = "https" if tls else "http"
    return proc, f"{scheme}://127.0.0.1:{port_file.read_text()}"


def _bundle_cost() -> tuple[int, float]:
    """Bytes of _ssl + the libssl/libcrypto it links, and ms to import ssl (median of 5)."""
    import _ssl

    files = {Path(_ssl.__file__).resolve()}
    maps = subprocess.run(
        [sys.executable, "-c", "import ssl, os; print(open(f'/proc/{os.getpid()}/maps').read())"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for line in maps.splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if "libssl" in path or "libcrypto" in path:
            files.add(Path(path).resolve())
    size = sum(f.stat().st_size for f in files)
    times = []
    for _ in range(5):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import ssl"],
            capture_output=True, text=True, check=True,
        ).stderr  # fmt: skip
        last = [ln for ln in out.splitlines() if ln.rstrip().endswith("| ssl")]
        times.append(int(last[-1].split("|")[1]) / 1000 if last else float("nan"))
    return size, statistics.median(times)


async def _series(rounds: int, requests: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        workdir = Path(d)
        certs = ServingCerts.generate()
        cert, key, ca = workdir / "tls.crt", workdir / "tls.key", workdir / "ca.pem"
        (
            cert.write_bytes(certs.cert_pem),
            key.write_bytes(certs.key_pem),
            ca.write_bytes(certs.ca_pem),
        )
        plain_proc, plain = _start(workdir, "plain", None)
        tls_proc, secure = _start(workdir, "tls", (cert, key))
        client_tls = ssl.create_default_context(cafile=str(ca))
        try:
            results: list[tuple[dict[str, float], dict[str, float]]] = []
            for i in range(rounds):
                a = await _round(plain, False, requests)
                b = await _round(secure, client_tls, requests)
                results.append((a, b))
                say(f"round {i + 1}/{rounds}: exec plain {a[SIZES[0][0]]:.3f} ms, "
                    f"TLS {b[SIZES[0][0]]:.3f} ms")  # fmt: skip
        finally:
            for p in (plain_proc, tls_proc):
                p.terminate()
                p.wait(10)
    size, import_ms = _bundle_cost()
    print(f"\nTLS on loopback: {rounds} interleaved rounds x {requests} requests per size "
          f"(medians over rounds; ratio = median of per-round TLS/plain)\n")  # fmt: skip
    print("| request | plain ms | TLS ms | TLS - plain ms | ratio |")
    print("|---|---|---|---|---|")
    for label in [s[0] for s in SIZES] + ["new connection + 1 request"]:
        plain_ms = statistics.median(a[label] for a, _ in results)
        tls_ms = statistics.median(b[label] for _, b in results)
        ratio = statistics.median(b[label] / a[label] for a, b in results)
        print(f"| {label} | {plain_ms:.3f} | {tls_ms:.3f} | {tls_ms - plain_ms:+.3f} | "
              f"{ratio:.2f} |")  # fmt: skip
    print(f"\nDaemon bundle: _ssl + libssl + libcrypto = {size / 2**20:.1f} MiB "
          f"(the bundle is ~15 MiB without them); `import ssl` {import_ms:.1f} ms "
          f"in a fresh interpreter (python -X importtime, median of 5)")  # fmt: skip
    print(f"Machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"{ssl.OPENSSL_VERSION}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m load.bench.tls", description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (plain, TLS)")
    p.add_argument("--requests", type=int, default=300, help="requests per size per round")
    p.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--cert", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--key", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve is not None:
        _serve(a.serve, a.cert, a.key)
        return
    asyncio.run(_series(a.rounds, a.requests))


if __name__ == "__main__":
    main()
