# Generated from sandman/sdk/ports.py by `make generate` (codegen): do not edit.
"""The blocking twin of :mod:`sandman.sdk.ports`: Port.

Each method is one call of its async twin through the portal
(:mod:`sandman.sdk.blocking.portal`); generated from the async source by ``codegen.blocking``.
"""

from __future__ import annotations

from collections.abc import Mapping

from sandman.sdk.blocking.portal import Bound
from sandman.sdk.ports import AsyncPort, PortResponse

__all__ = ["Port"]


class Port(Bound[AsyncPort]):
    """Blocking twin of :class:`sandman.sdk.ports.AsyncPort`.

    One port inside one sandbox (cheap: no I/O until a call)."""

    @property
    def sandbox_id(self) -> str:
        """The sandbox's id."""
        return self._async.sandbox_id

    @property
    def port(self) -> int:
        """The port the server listens on inside the sandbox."""
        return self._async.port

    def __repr__(self) -> str:
        return repr(self._async).replace("<Async", "<", 1)

    @property
    def url(self) -> str:
        """The port's base URL on the facade (a path goes after it)."""
        return self._async.url

    @property
    def headers(self) -> dict[str, str]:
        """What a request to :attr:`url` must carry: the tenant's bearer token."""
        return self._async.headers

    def request(
        self,
        method: str,
        path: str = "/",
        *,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> PortResponse:
        """Send one request to the server and read its answer whole (``path`` may carry a
        query string: ``"/search?q=x"``)."""
        return self._call(
            lambda: self._async.request(
                method, path, data=data, headers=headers, timeout_s=timeout_s
            )
        )
