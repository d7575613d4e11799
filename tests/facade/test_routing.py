"""Routes reference their handlers: every row of the facade's route table is served by
exactly one handler, every handler of the ``(request, call)`` shape serves one row, and the
aiohttp routes are the table's, in its order."""

from __future__ import annotations

import inspect

from aiohttp import web

from facade.handlers import FacadeHandlers
from facade.routes import ROUTES


def _handlers() -> FacadeHandlers:
    """The handlers without their services: the binding reads no state, and a route
    served is tested end to end elsewhere (tests/e2e)."""
    return FacadeHandlers.__new__(FacadeHandlers)


def test_every_route_has_one_handler_and_every_handler_one_route() -> None:
    operations = _handlers().operations()
    assert set(operations) == set(ROUTES) and len(operations) == len(ROUTES)
    functions = [handler.__func__ for handler in operations.values()]  # type: ignore[attr-defined]
    assert len(set(functions)) == len(functions), "a handler serves two routes"
    shaped = {
        f
        for f in vars(FacadeHandlers).values()
        if inspect.iscoroutinefunction(f)
        and list(inspect.signature(f).parameters) == ["self", "request", "call"]
    }
    assert shaped == set(functions), "a (request, call) handler no route reaches"


def test_the_served_routes_are_the_tables_in_its_order() -> None:
    served = [r for r in _handlers().routes() if isinstance(r, web.RouteDef)]
    own = [(r.method, r.path) for r in served][: len(ROUTES)]
    assert own == [(r.method, r.path) for r in ROUTES]
