"""The published OpenAPI document is generated from the code and must match it."""

from __future__ import annotations

from pathlib import Path

from daemon.sandbox.api import ROUTES
from daemon.sandbox.openapi import build_document, render

DOC = Path(__file__).parents[2] / "docs" / "openapi" / "daemon.json"


def test_committed_document_is_current() -> None:
    assert DOC.read_text() == render(), (
        "run: python -m daemon.sandbox.openapi > docs/openapi/daemon.json"
    )


def test_every_route_is_documented_with_its_schemas() -> None:
    document = build_document()
    schemas = document["components"]["schemas"]
    for route in ROUTES:
        assert route.method.lower() in document["paths"][route.path]
        for model in (route.request, route.response):
            if model is not None:
                assert model.__name__ in schemas
