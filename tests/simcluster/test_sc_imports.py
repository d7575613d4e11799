"""simcluster's module structure: no import cycles, no use of another module's private names.

Cycles are found among the modules grimp sees importing each other, TYPE_CHECKING-only
imports included: a circle there still ties the modules' designs together (and is one
runtime import away from a partially initialised module).
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

import simcluster

ROOT = Path(simcluster.__file__).parent


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
            elif child in on_stack:
                low[module] = min(low[module], index[child])
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    """The check below can fail: a graph with a circle is reported."""
    graph = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        graph.add_import(importer=a, imported=b)
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_simcluster_has_no_import_cycles() -> None:
    graph = grimp.build_graph("simcluster", cache_dir=None)
    assert "simcluster.apiserver.core" in graph.modules
    assert _cycles(graph) == []


def _private_uses(source: str) -> list[str]:
    """``x._name`` where ``x`` is not ``self``/``cls``, and ``from m import _name``."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom):
            out.extend((node.lineno, f"import {a.name}") for a in node.names if _private(a.name))
    return [f"{line}: {text}" for line, text in sorted(out)]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_private_use_finder_finds_one() -> None:
    assert _private_uses("core._write(x)\nself._ok()\nfrom m import _f\n") == [
        "1: core._write",
        "3: import _f",
    ]


def test_no_simcluster_module_uses_another_modules_private_names() -> None:
    offenders = {
        str(path.relative_to(ROOT)): uses
        for path in sorted(ROOT.rglob("*.py"))
        if (uses := _private_uses(path.read_text()))
    }
    assert offenders == {}
