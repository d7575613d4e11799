"""Per-sandbox daemon tokens, derived rather than stored.

The facade needs the token of any sandbox it proxies to, on any replica, after any restart,
without a database: the token is ``HMAC-SHA256(facade secret, "namespace/name")``. It is
injected into the pod at creation (its env) and recomputed on every proxied call. Trainers
never see it. Rotating the facade secret invalidates every running sandbox's token, so
rotation means draining (documented in docs/facade.md when the facade lands).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

__all__ = ["TokenMinter"]

MIN_SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class TokenMinter:
    secret: bytes

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET_BYTES:
            raise ValueError(f"facade secret must be at least {MIN_SECRET_BYTES} bytes")

    def token_for(self, namespace: str, name: str) -> str:
        digest = hmac.new(self.secret, f"{namespace}/{name}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def pool_token_for(self, namespace: str, announcement: str) -> str:
        """The pool token of an announcement's pool pods (kube/pool_contract.py): the only
        credential their daemons take before a claim, and only for ``POST /v1/claim``. A
        ``/`` cannot be in a pod name, so it never equals a sandbox's token."""
        return self.token_for(namespace, f"pool/{announcement}")
