"""Who may call this daemon, and a pool sandbox's claim.

Why a module of its own: the credential used to be one token fixed at start. A *pool*
sandbox (created ahead of a training step, kube/pool_contract.py) starts with its
announcement's pool token and no owner; the create that claims it hands it the sandbox's own
token, the request's env and idle timeout (``POST /v1/claim``, the facade's call — the facade
never proxies it). This module holds that state so the server only asks two questions of it:
is this token good for this route, and may this claim happen.

- **Digests, compared in constant time.** The daemon keeps SHA-256 digests of the tokens it
  accepts, never the tokens, and compares digests with ``hmac.compare_digest``: a later
  switch to verifier-only credentials (the facade sending a token whose digest the pod spec
  carries) changes what is stored, not how it is checked.
- **Pristine by construction.** Before its claim a pool daemon refuses every operation but
  the claim (409 ``sandbox_unclaimed``): no tool call can have run in a sandbox a create is
  handed.
- **Claimed once.** After the claim, tool calls need the claim's token (the pool token is
  refused for them). The claim route keeps accepting the pool token so a facade that lost
  the answer can repeat it: the same claim (its name and token) is answered 204 again, any
  other claim 409 ``already_claimed`` — a pod two claims name (which the controller never
  writes) still serves only one of them. A daemon started with its own token (a cold
  sandbox) refuses every claim the same way.
"""

from __future__ import annotations

import hmac
import os

from sandman.wire.daemon import ClaimRequest
from sandman.wire.errors import Reason

from .commands import check_env
from .errors import DaemonError
from .layout import token_digest

__all__ = ["Credentials", "digest"]


#: A presented token's digest, compared with the verifiers held (module docstring).
digest = token_digest


class Credentials:
    """The accepted token digests and the claim state of one daemon."""

    def __init__(self, verifier: bytes, *, pooled: bool) -> None:
        """``verifier``: the digest of the token the daemon starts with (its settings'
        ``token_sha256``, or the digest of its ``token``)."""
        #: The token of tool calls: the sandbox's own; None for a pool sandbox until claimed.
        self._current: bytes | None = None if pooled else verifier
        #: The pool token: the claim route's credential (None: never a pool sandbox).
        self._pool: bytes | None = verifier if pooled else None
        #: (claim name, token digest) once claimed.
        self._claimed: tuple[str, bytes] | None = None

    @property
    def unclaimed(self) -> bool:
        return self._pool is not None and self._claimed is None

    def check(self, token: str, *, claim_route: bool) -> None:
        """Raises 401 ``invalid_token`` unless ``token`` is good for the route, 409
        ``sandbox_unclaimed`` for a tool call before the claim."""
        presented = digest(token)
        if claim_route:
            expected = self._pool if self._pool is not None else self._current
        elif self.unclaimed:
            if self._pool is not None and hmac.compare_digest(presented, self._pool):
                raise DaemonError(
                    "a pool sandbox runs nothing before its claim",
                    reason=Reason.SANDBOX_UNCLAIMED,
                )
            expected = None
        else:
            expected = self._current
        if expected is None or not hmac.compare_digest(presented, expected):
            raise DaemonError("invalid bearer token", reason=Reason.INVALID_TOKEN)

    def claim(self, request: ClaimRequest) -> bool:
        """Take the claim: True when it is new (apply its env and idle timeout), False for a
        repeat of the same claim. Raises 409 ``already_claimed`` for any other."""
        new = digest(request.token)
        if self._pool is None:
            raise DaemonError("not a pool sandbox", reason=Reason.ALREADY_CLAIMED)
        if self._claimed is not None:
            name, held = self._claimed
            if name == request.claim and hmac.compare_digest(new, held):
                return False
            raise DaemonError("claimed by another claim", reason=Reason.ALREADY_CLAIMED)
        check_env(request.env)
        os.environ.update(request.env)  # every later command inherits os.environ
        self._claimed = (request.claim, new)
        self._current = new
        return True
