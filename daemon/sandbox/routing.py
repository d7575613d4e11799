"""Which handler serves a request: method + path template → the handler and its parameters.

The rows come from the route table (``api.py``), the handlers from the server, paired by
``api.bind`` — so the router holds exactly the table's operations, each with the handler
the server named for it. Templates are matched against the request's percent-decoded path,
and a parameter is decoded once more (``/v1/sessions/my%2520s/run`` names the session
``my%20s`` as the client encoded it, never a path of more segments).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Generic, TypeVar
from urllib.parse import unquote

from sandman.wire.errors import Reason

from .api import Route
from .errors import DaemonError

__all__ = ["Router"]

H = TypeVar("H")


class Router(Generic[H]):
    """Method + path-template routing: ``/v1/sessions/{name}/run``."""

    def __init__(self, bound: Iterable[tuple[Route, H]] = ()) -> None:
        self._routes: list[tuple[str, re.Pattern[str], H]] = []
        for route, handler in bound:
            self.add(route.method, route.path, handler)

    def add(self, method: str, template: str, handler: H) -> None:
        pattern = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", template)
        self._routes.append((method, re.compile(f"^{pattern}$"), handler))

    def resolve(self, method: str, path: str) -> tuple[H, dict[str, str]]:
        allowed = False
        for route_method, pattern, handler in self._routes:
            match = pattern.match(path)
            if match is None:
                continue
            if route_method == method:
                return handler, {k: unquote(v) for k, v in match.groupdict().items()}
            allowed = True
        if allowed:
            raise DaemonError(
                f"{method} is not allowed on {path}", reason=Reason.METHOD_NOT_ALLOWED
            )
        raise DaemonError(f"no such endpoint: {path}", reason=Reason.NO_SUCH_ENDPOINT)
