"""The docs' tables of every process's flags are generated from the settings definitions
(:func:`sandman.base.settings.table`), and held current here like the golden pod specs:
``SANDMAN_UPDATE_GOLDEN=1 pytest tests/test_settings_docs.py`` rewrites them (review the
diff). A hand-written table had drifted from the flags it listed; a generated one cannot.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.app import ControllerSettings
from daemon.node.settings import AgentSettings
from daemon.sandbox.settings import DaemonSettings
from facade.app import FacadeSettings
from sandman.base.settings import table

DOCS = Path(__file__).resolve().parents[1] / "docs"
TABLES = [
    ("controller.md", ControllerSettings),
    ("facade.md", FacadeSettings),
    ("daemon-api.md", DaemonSettings),
    ("node-agent.md", AgentSettings),
]
END = "<!-- /settings -->"


def begin(cls: type) -> str:
    return (
        f"<!-- settings: {cls.__module__}.{cls.__qualname__}, generated "
        "(SANDMAN_UPDATE_GOLDEN=1 pytest tests/test_settings_docs.py) -->"
    )


@pytest.mark.parametrize(("doc", "cls"), TABLES, ids=[doc for doc, _ in TABLES])
def test_the_docs_table_is_the_one_the_definition_generates(doc: str, cls: type) -> None:
    path = DOCS / doc
    text = path.read_text()
    assert text.count(begin(cls)) == 1, f"{doc} needs one line {begin(cls)!r}"
    head, rest = text.split(begin(cls) + "\n")
    written, tail = rest.split(END, 1)
    generated = "\n" + table(cls) + "\n"
    if os.environ.get("SANDMAN_UPDATE_GOLDEN"):
        path.write_text(f"{head}{begin(cls)}\n{generated}{END}{tail}")
        return
    assert written == generated, "SANDMAN_UPDATE_GOLDEN=1 pytest ... to accept a change"
