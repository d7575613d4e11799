"""Per-sandbox daemon tokens, derived rather than stored.

The facade needs the token of any sandbox it proxies to, on any replica, after any restart,
without a database: the token is ``HMAC-SHA256(facade secret, "namespace/name/salt")``, where
the salt is a random value drawn when the pod is rendered and kept in its
``sandman.io/token-salt`` annotation. The pod carries only the token's verifier (its
SHA-256); the facade recomputes the token from the pod on every proxied call. Trainers never
see it.

**Bound to one sandbox, gone with it.** The salt is the pod's own: a sandbox re-created
under the same name (a released id reused by an Idempotency-Key, a replacement) gets another
salt and so another token, and once the pod is deleted nothing can derive its token again —
a token seen once (say in the facade→daemon traffic) drives that one pod and nothing after
it. Reading the salt grants nothing without the facade secret. A pod rendered before salts
existed has none and keeps its ``namespace/name`` token until it ends.

**A claimed pool sandbox** (kube/pool_contract.py) was rendered before anyone claimed it,
with its announcement's pool token and no salt of its own: its own token, handed to its
daemon with the claim (facade/pooled.py), is salted with the pod's ``uid`` instead — unique
to that pod, ever, and on the pod for every replica to read.

Rotating the facade secret invalidates every running sandbox's token, so rotation means
draining (docs/facade.md).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from kube.contract import ANNOTATION_TOKEN_SALT, LABEL_SANDBOX
from kube.pool_contract import LABEL_POOL

__all__ = ["TokenMinter"]

MIN_SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class TokenMinter:
    secret: bytes

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET_BYTES:
            raise ValueError(f"facade secret must be at least {MIN_SECRET_BYTES} bytes")

    @staticmethod
    def new_salt() -> str:
        """A new pod's salt (module docstring): 64 random bits, as hex."""
        return secrets.token_hex(8)

    def token_for(self, namespace: str, name: str, salt: str) -> str:
        """The token of pod ``namespace/name`` rendered with ``salt`` (``""``: a pod from
        before salts, whose token was ``namespace/name``'s alone)."""
        message = f"{namespace}/{name}/{salt}" if salt else f"{namespace}/{name}"
        digest = hmac.new(self.secret, message.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def token_of(self, pod: dict[str, Any]) -> str:
        """The token of ``pod`` as the API server holds it: its namespace, its sandbox (a
        replacement, ``<sandbox>-r<N>``, copies the original's verifier and salt: it is the
        same sandbox) and its salt."""
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        sandbox = labels.get(LABEL_SANDBOX, meta["name"])
        if labels.get(LABEL_POOL):  # a pool pod: the token its claim hands its daemon
            return self.token_for(meta["namespace"], sandbox, f"claim/{meta['uid']}")
        salt = (meta.get("annotations") or {}).get(ANNOTATION_TOKEN_SALT, "")
        return self.token_for(meta["namespace"], sandbox, salt)

    def pool_token_for(self, namespace: str, announcement: str) -> str:
        """The pool token of an announcement's pool pods (kube/pool_contract.py): the only
        credential their daemons take before a claim, and only for ``POST /v1/claim``. A
        ``/`` cannot be in a pod name, so it never equals a sandbox's token."""
        return self.token_for(namespace, f"pool/{announcement}", "")
