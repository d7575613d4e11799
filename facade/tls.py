"""TLS for the trainer's hop (trainer -> facade), when the facade terminates it itself.

Why here and optional: the production overlay can terminate TLS at an ingress or at the
facade (docs/operator-guide.md, "TLS"); on loopback (``make demo``, tests) it is off. The
certificate usually comes from a Secret that cert-manager rotates: the files are re-read when
their modification time changes, into the same ``SSLContext``, so new connections get the new
certificate and open ones keep theirs — no restart, no dropped tool calls.

Why not TLS on the facade -> daemon hop too: measured and argued in docs/operator-guide.md
("TLS") — the daemon bundle carries no libssl (docs/daemon-bundle.md), that hop is held by
NetworkPolicy (only the facade reaches a daemon's port), sandboxes have no NET_RAW (no
sniffing or spoofing on the node's bridge), and every call carries the sandbox's own token;
a cluster whose pod network crosses untrusted links encrypts it below (the CNI's WireGuard or
IPsec), for every pod at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl

__all__ = ["ServerTls"]

log = logging.getLogger("facade.tls")


class ServerTls:
    """A server ``SSLContext`` (TLS 1.2 or later) from PEM files, reloaded when they change."""

    def __init__(self, cert_file: str, key_file: str, *, check_every_s: float = 30.0) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.check_every_s = check_every_s
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._loaded = self._stamp()
        self.context.load_cert_chain(cert_file, key_file)

    def _stamp(self) -> tuple[float, float]:
        return os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime

    def reload_if_changed(self) -> bool:
        """Load the files again if either changed since the last load; True if it did. A
        pair that does not load (a rotation caught half-written) keeps the old one."""
        try:
            stamp = self._stamp()
            if stamp == self._loaded:
                return False
            # Into a throwaway context first: a failed load can leave the live one holding
            # the new certificate with the old key, and every handshake would fail.
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                self.cert_file, self.key_file
            )
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as e:
            log.warning("TLS certificate not reloaded (%s); keeping the current one", e)
            return False
        self._loaded = stamp
        log.info("TLS certificate reloaded from %s", self.cert_file)
        return True

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.check_every_s)
            self.reload_if_changed()
