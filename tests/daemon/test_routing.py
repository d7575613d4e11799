"""Routes reference their handlers: every row of the route table is served by exactly one
handler, every handler serves one row, and the router hands each request to it."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

import pytest

from daemon.sandbox import api
from daemon.sandbox.api import ROUTES, bind
from daemon.sandbox.errors import DaemonError
from daemon.sandbox.routing import Router
from daemon.sandbox.server import SandboxDaemon
from daemon.sandbox.settings import DaemonSettings


def _serves_a_route(function: object) -> bool:
    """Shaped like a route handler: ``async def _x(self, request) -> Response``."""
    if not inspect.iscoroutinefunction(function):
        return False
    parameters = list(inspect.signature(function).parameters)
    return parameters == ["self", "request"] and function.__annotations__["return"] == "Response"


def test_every_route_has_one_handler_and_every_handler_one_route() -> None:
    handlers = SandboxDaemon(DaemonSettings(token="t")).handlers()
    assert set(handlers) == set(ROUTES) and len(handlers) == len(ROUTES)
    functions = [handler.__func__ for handler in handlers.values()]  # type: ignore[attr-defined]
    assert len(set(functions)) == len(functions), "a handler serves two routes"
    # ... and no handler is left that no route reaches (the pipeline every request enters,
    # ``_handle``, is the HTTP server's, not a route's).
    shaped = {f for f in vars(SandboxDaemon).values() if _serves_a_route(f)}
    assert shaped - {SandboxDaemon._handle} == set(functions)


def test_the_router_hands_each_operation_to_its_handler() -> None:
    daemon = SandboxDaemon(DaemonSettings(token="t"))
    handlers = daemon.handlers()
    for route in ROUTES:
        path = re.sub(r"\{\w+\}", "x", route.path)
        handler, params = daemon.router.resolve(route.method, path)
        assert handler == handlers[route], route.operation
        assert set(params.values()) <= {"x"}


def _noop() -> None:
    return None


def _other() -> None:
    return None


@pytest.mark.parametrize(
    ("handlers", "complaint"),
    [
        ({api.INFO: _noop}, "without a handler"),
        ({**dict.fromkeys(ROUTES, _noop)}, "more than one route"),
        (
            {
                **{r: (lambda r=r: r) for r in ROUTES},
                api.DaemonRoute("GET", "/x", "x", "x"): _other,
            },
            "handlers of no route",
        ),
    ],
)
def test_bind_refuses_a_table_and_handlers_that_disagree(
    handlers: dict[api.Route, Callable[[], object]], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        bind(ROUTES, handlers)


def test_router_resolves_templates_and_reports_405_and_404() -> None:
    router: Router[str] = Router([(api.SESSION_RUN, "run")])
    handler, params = router.resolve("POST", "/v1/sessions/my%20s/run")
    assert handler == "run"
    assert params == {"name": "my s"}
    with pytest.raises(DaemonError) as wrong_method:
        router.resolve("GET", "/v1/sessions/x/run")
    assert (wrong_method.value.reason, wrong_method.value.status) == ("method_not_allowed", 405)
    with pytest.raises(DaemonError) as missing:
        router.resolve("POST", "/v1/sessions/x/y/run")
    assert (missing.value.reason, missing.value.status) == ("no_such_endpoint", 404)
