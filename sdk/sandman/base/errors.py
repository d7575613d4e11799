"""The one shape every Sandman error has, whichever process raises it.

Why a shared base: four layers raise errors that describe an HTTP-ish failure — the
Kubernetes client (``kube.KubeError``), the facade (``facade.errors.FacadeError``), the
sandbox daemon (``daemon.sandbox.errors.DaemonError``) and the trainer SDK
(``sandman.SandmanError``) — and code that handles one of them should not have to learn
another spelling for the same facts. They were built four ways (message first or last, the
status as ``code`` or ``status``, ``retryable`` beside ``retriable``, ``retry_after`` beside
``retry_after_s``); now each is a :class:`Failure`:

- the message is the only positional argument; everything else is keyword-only;
- ``status``: the HTTP status of the answer (0: there was no answer);
- ``reason``: the machine-readable reason (the Kubernetes ``Status.reason`` for the client
  layer, one of :class:`sandman.wire.errors.Reason` for the facade and the daemon);
- ``retriable``: whether the same call may succeed later (a subclass's default, or the
  reason's, as :mod:`sandman.wire.errors` says);
- ``retry_after_s``: how long the server asked the caller to wait, if it said.

Causes are chained with ``raise ... from``, so the transport's own exception stays in the
traceback (ruff's B904 holds product code to it). Standard library only, like the rest of
:mod:`sandman.base`: the sandbox daemon imports it in every sandbox.
"""

from __future__ import annotations

__all__ = ["Failure"]


class Failure(Exception):
    """An expected failure: ``message``, then ``reason``, ``status``, ``retriable`` and
    ``retry_after_s`` (module docstring). A subclass sets class-level defaults; a keyword
    given to the constructor overrides them for this instance."""

    status: int = 0
    reason: str = ""
    retriable: bool = False
    retry_after_s: float | None = None

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        status: int | None = None,
        retriable: bool | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        if status is not None:
            self.status = status
        if retriable is not None:
            self.retriable = retriable
        if retry_after_s is not None:
            self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}" if self.reason else self.message
