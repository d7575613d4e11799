"""The blocking SDK, written from the async one: ``Sandman``, ``Sandbox``, ``Preparation``...

Why generated: the blocking classes are the async classes driven through a portal
(``sandman.sdk.blocking.portal``), method for method, and type checkers, IDEs and ``help()``
need each method spelled out with its real signature. Written by hand, every signature was a
copy a test had to hold equal to its twin; here each is *read* from the async source and
written out, with the docstring, so a change to an async method reaches its twin by
``make generate`` and a forgotten one fails tests/test_generated.py.

Why from the source (``ast``) and not by importing the SDK: the SDK's package imports the
generated modules, so a generator that imported it could not run once they were stale in a
way that breaks the import. Reading the source also keeps what a signature says as written
(``ttl_s: int = DEFAULT_PREPARE_TTL_S``, not ``= 3600``).

The rules, one per shape of member of an async class (anything else is refused, never
guessed at):

- ``async def m`` → ``def m``: one ``portal.call`` of the twin's coroutine (a ``lambda``, so
  the forwarding itself is type-checked); an async generator → an iterator driven item by
  item; ``aclose``/``__aenter__``/``__aexit__`` → ``close``/``__enter__``/``__exit__``;
- a result of an async SDK type is wrapped in its blocking twin (``AsyncSandbox`` →
  ``Sandbox``, lists and iterators of them too); the twin's own object is returned as the
  blocking ``self``;
- a ``@property`` → a property reading the twin's; a class-level annotation ``name: T`` (the
  async class's declared public attributes) → a read-only property, or, when ``T`` is an
  async SDK type, an attribute holding its blocking twin (``sandbox.files``);
- a plain ``def m`` (no I/O: ``sandbox.url(port)``) → a plain method returning the twin's
  result, wrapped as above when it is an async SDK object (``sandbox.port(8080)``);
- ``@async_only`` → nothing: the member hands out objects only an event loop can drive
  (aiohttp's streamed responses and WebSockets, ``sandman.sdk.ports``);
- ``__repr__`` → the twin's, without its ``Async`` prefix;
- the class the trainer constructs (``Sandman``) mirrors its twin's ``__init__`` and owns the
  portal: entering that fails stops it, closing stops it.

One blocking module per async module (``sandman.sdk.sandbox`` → ``sandman.sdk.blocking.
sandbox``): the twins split as the concepts do.
"""

from __future__ import annotations

import ast
import builtins
import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .files import ROOT, Output, header, python_module

__all__ = ["OUTPUTS", "TWINS", "GenerationError", "Twin", "render"]

PACKAGE = "sandman.sdk.blocking"
PORTAL = f"{PACKAGE}.portal"


@dataclass(frozen=True)
class Twin:
    """An async class of the SDK and the name of its blocking twin."""

    module: str
    async_name: str
    name: str
    #: A public attribute holding the async object (kept from the hand-written twins).
    handle: str | None = None
    #: Constructed by the trainer (mirrors the async ``__init__``) and owns the portal.
    owns_portal: bool = False

    @property
    def blocking_module(self) -> str:
        return f"{PACKAGE}.{self.module.rsplit('.', 1)[1]}"


TWINS = (
    Twin("sandman.sdk.client", "AsyncSandman", "Sandman", "async_client", owns_portal=True),
    Twin("sandman.sdk.sandbox", "AsyncSandbox", "Sandbox", "async_sandbox"),
    Twin("sandman.sdk.announcement", "AsyncPreparation", "Preparation", "async_preparation"),
    Twin("sandman.sdk.tools", "AsyncSession", "Session"),
    Twin("sandman.sdk.tools", "AsyncFiles", "Files"),
    Twin("sandman.sdk.tools", "AsyncProcesses", "Processes"),
    Twin("sandman.sdk.ports", "AsyncPort", "Port"),
)
RENAMED = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}
#: What closes a portal owner's twin: the portal stops after it.
CLOSING = ("aclose", "__aexit__")
#: Decorators that only document a method: the twin carries them too. Any other is refused.
DOC_DECORATORS = ("with_create_options",)
#: A member only the async SDK has (module docstring).
ASYNC_ONLY = "async_only"


class GenerationError(Exception):
    """An async member no rule covers: extend the generator, or change the member."""


def _source_path(module: str) -> Path:
    return ROOT / "sdk" / Path(*module.split(".")).with_suffix(".py")


@dataclass
class _Names:
    """The names a generated module uses, and where each comes from."""

    module: str
    #: name -> import statement, from the async modules read.
    sources: dict[str, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    imports: set[str] = field(default_factory=set)

    def read(self, async_module: str, tree: ast.Module) -> None:
        package = async_module.rsplit(".", 1)[0]
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                for a in node.names:
                    alias = f" as {a.asname}" if a.asname else ""
                    self.sources[a.asname or a.name] = f"from {base} import {a.name}{alias}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    alias = f" as {a.asname}" if a.asname else ""
                    self.sources[a.asname or a.name.split(".")[0]] = f"import {a.name}{alias}"
            elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                self.sources[node.name] = f"from {async_module} import {node.name}"

    def use(self, *nodes: ast.AST | None) -> None:
        for node in nodes:
            if node is not None:
                self.used |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    def import_lines(self, defined: set[str]) -> list[str]:
        lines = set(self.imports)
        for name in sorted(self.used - defined):
            if name in self.sources:
                lines.add(self.sources[name])
            elif not hasattr(builtins, name):
                raise GenerationError(f"{self.module}: no import known for {name!r}")
        return sorted(lines)


class _ToBlocking(ast.NodeTransformer):
    """An annotation of the async world spelled for the blocking one."""

    def __init__(self, twins: dict[str, Twin]) -> None:
        self.twins = twins

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.twins:
            return ast.copy_location(ast.Name(self.twins[node.id].name, node.ctx), node)
        if node.id == "AsyncIterator":
            return ast.copy_location(ast.Name("Iterator", node.ctx), node)
        return node


def _mentions(node: ast.AST | None, names: Iterable[str]) -> bool:
    wanted = set(names)
    return node is not None and any(
        isinstance(n, ast.Name) and n.id in wanted for n in ast.walk(node)
    )


def _is_generator(fn: ast.AsyncFunctionDef) -> bool:
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Yield | ast.YieldFrom):
            return True
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _forward(args: ast.arguments) -> str:
    """The call passing a method's parameters on as it received them (``self`` left out)."""
    parts = [a.arg for a in [*args.posonlyargs, *args.args][1:]]
    if args.vararg:
        parts.append(f"*{args.vararg.arg}")
    parts += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if args.kwarg:
        parts.append(f"**{args.kwarg.arg}")
    return ", ".join(parts)


def _docstring(node: ast.AST, indent: str, first: str | None = None) -> str:
    """``node``'s docstring (after ``first``, if given) as a literal at ``indent``."""
    doc = "\n\n".join(d for d in (first, ast.get_docstring(node)) if d)  # type: ignore[arg-type]
    if not doc:
        return ""
    if "\\" in doc or '"""' in doc:
        raise GenerationError(f"a docstring with a backslash or triple quotes: {doc[:60]!r}")
    text = "\n".join(f"{indent}{line}" if line else "" for line in doc.split("\n"))
    return f'{indent}"""{text.removeprefix(indent)}"""\n'


@dataclass
class _Class:
    """One blocking class being written from its async twin's ``ClassDef``."""

    twin: Twin
    node: ast.ClassDef
    twins: dict[str, Twin]
    names: _Names
    members: list[str] = field(default_factory=list)
    attributes: list[tuple[str, str]] = field(default_factory=list)

    def blocking(self, node: ast.expr | None) -> ast.expr | None:
        """An annotation as the blocking world spells it (its names noted for imports)."""
        if node is None:
            return None
        mapped: ast.expr = _ToBlocking(self.twins).visit(copy.deepcopy(node))
        self.names.use(mapped)
        return mapped

    def annotation(self, node: ast.expr | None, what: str) -> str:
        if node is None:
            raise GenerationError(f"{self.where(what)}: no annotation")
        return ast.unparse(self.blocking(node))  # type: ignore[arg-type]

    def where(self, name: str) -> str:
        return f"{self.twin.module}.{self.twin.async_name}.{name}"

    def render(self) -> str:
        for stmt in self.node.body:
            self.member(stmt)
        base = "PortalOwner" if self.twin.owns_portal else "Bound"
        self.names.imports.add(f"from {PORTAL} import {base}")
        self.names.used.add(self.twin.async_name)
        doc = f"Blocking twin of :class:`{self.twin.module}.{self.twin.async_name}`."
        text = _docstring(self.node, "    ", first=doc)
        parts = [f"class {self.twin.name}({base}[{self.twin.async_name}]):\n{text}"]
        if self.attributes and self.twin.owns_portal:
            raise GenerationError(f"{self.where('')}: a portal owner holding async objects")
        if self.attributes:
            parts.append(self.constructor())
        if self.twin.handle:
            parts.append(
                f"    @property\n    def {self.twin.handle}(self) -> {self.twin.async_name}:\n"
                f'        """The async object this one drives."""\n        return self._async\n'
            )
        return "\n".join(parts + self.members)

    def constructor(self) -> str:
        self.names.imports.add("from anyio.from_thread import BlockingPortal")
        twin = self.twin.async_name
        lines = [
            f"    def __init__(self, portal: BlockingPortal, twin: {twin}) -> None:",
            "        super().__init__(portal, twin)",
        ]
        lines += [f"        self.{n} = {cls}(portal, twin.{n})" for n, cls in self.attributes]
        self.names.used |= {cls for _, cls in self.attributes}
        return "\n".join(lines) + "\n"

    def member(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            self.attribute(stmt.target.id, stmt.annotation, stmt)
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            self.method(stmt)
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            raise GenerationError(f"{self.where('')}: a class-level {type(stmt).__name__}")

    def attribute(self, name: str, annotation: ast.expr, stmt: ast.stmt) -> None:
        if name.startswith("_"):
            return
        if isinstance(annotation, ast.Name) and annotation.id in self.twins:
            self.attributes.append((name, self.twins[annotation.id].name))
            return
        if _mentions(annotation, self.twins):
            raise GenerationError(f"{self.where(name)}: an attribute holding async objects")
        returns = self.annotation(annotation, name)
        doc = self.attribute_doc(stmt)
        self.members.append(
            f"    @property\n    def {name}(self) -> {returns}:\n{doc}"
            f"        return self._async.{name}\n"
        )

    def attribute_doc(self, stmt: ast.stmt) -> str:
        """An attribute's ``#:`` comment becomes its property's docstring."""
        comments: list[str] = []
        source = _source_path(self.twin.module).read_text().splitlines()
        line = stmt.lineno - 2
        while line >= 0 and source[line].strip().startswith("#:"):
            comments.insert(0, source[line].strip()[2:].strip())
            line -= 1
        return f'        """{" ".join(comments)}"""\n' if comments else ""

    def method(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        name = fn.name
        if name == "__init__":
            if self.twin.owns_portal:
                self.members.append(self.owner_init(fn))
            return
        if name == "__repr__":
            self.members.append(
                "    def __repr__(self) -> str:\n"
                '        return repr(self._async).replace("<Async", "<", 1)\n'
            )
            return
        if name.startswith("_") and name not in RENAMED:
            return
        decorators = [ast.unparse(d) for d in fn.decorator_list]
        if decorators == ["property"]:
            self.members.append(self.property(fn))
            return
        if decorators[:1] == [ASYNC_ONLY]:
            return
        if any(d not in DOC_DECORATORS for d in decorators):
            raise GenerationError(f"{self.where(name)}: decorated {decorators}")
        if not isinstance(fn, ast.AsyncFunctionDef):
            self.members.append(self.plain(fn))
            return
        self.names.use(*fn.decorator_list)
        self.members.append(self.coroutine(fn, [f"    @{d}\n" for d in decorators]))

    def signature(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> str:
        args = copy.deepcopy(fn.args)
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        for arg in (a for a in every if a is not None):
            if _mentions(arg.annotation, self.twins):
                raise GenerationError(f"{self.where(fn.name)}: takes an async object ({arg.arg})")
            arg.annotation = self.blocking(arg.annotation)
        self.names.use(*args.defaults, *[d for d in args.kw_defaults if d is not None])
        return f"    def {name}({ast.unparse(args)})"

    def property(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
        if _mentions(fn.returns, self.twins):
            raise GenerationError(f"{self.where(fn.name)}: a property holding async objects")
        returns = self.annotation(fn.returns, fn.name)
        head = f"    @property\n{self.signature(fn, fn.name)} -> {returns}:\n"
        return f"{head}{_docstring(fn, ' ' * 8)}        return self._async.{fn.name}\n"

    def plain(self, fn: ast.FunctionDef) -> str:
        """A plain method: the twin's result, an async SDK object wrapped in its twin."""
        returns = self.annotation(fn.returns, fn.name)
        head = f"{self.signature(fn, fn.name)} -> {returns}:\n{_docstring(fn, ' ' * 8)}"
        value = f"self._async.{fn.name}({_forward(fn.args)})"
        if isinstance(fn.returns, ast.Name) and fn.returns.id in self.twins:
            return f"{head}        return self._wrap({self.twins[fn.returns.id].name}, {value})\n"
        if _mentions(fn.returns, self.twins):
            raise GenerationError(f"{self.where(fn.name)}: returns async objects unwrapped")
        return f"{head}        return {value}\n"

    def owner_init(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
        head = f"{self.signature(fn, '__init__')} -> None:\n{_docstring(fn, ' ' * 8)}"
        return f"{head}        super().__init__({self.twin.async_name}({_forward(fn.args)}))\n"

    def coroutine(self, fn: ast.AsyncFunctionDef, decorators: list[str]) -> str:
        name = RENAMED.get(fn.name, fn.name)
        returns = self.annotation(fn.returns, fn.name)
        head = f"{''.join(decorators)}{self.signature(fn, name)} -> {returns}:\n"
        return head + _docstring(fn, " " * 8) + f"        {self.body(fn)}\n"

    def body(self, fn: ast.AsyncFunctionDef) -> str:
        coroutine = f"self._async.{fn.name}({_forward(fn.args)})"
        call = f"self._call(lambda: {coroutine})"
        if self.twin.owns_portal and fn.name in CLOSING:
            if not (isinstance(fn.returns, ast.Constant) and fn.returns.value is None):
                raise GenerationError(f"{self.where(fn.name)}: a closing call returns a value")
            return f"self._finish(lambda: {coroutine})"
        if self.twin.owns_portal and fn.name == "__aenter__":
            call = f"self._enter(lambda: {coroutine})"
        kind, twin = self.result(fn)
        if _is_generator(fn):
            self.names.imports.add("from collections.abc import Iterator")
            items = f"self._iterate({coroutine})"
            if twin is None:
                return f"return {items}"
            return f"return (self._wrap({twin}, x) for x in {items})"
        return {
            "none": call,
            "value": f"return {call}",
            "one": f"return self._wrap({twin}, {call})",
            "list": f"return [self._wrap({twin}, x) for x in {call}]",
        }[kind]

    def result(self, fn: ast.AsyncFunctionDef) -> tuple[str, str | None]:
        """What the twin's coroutine returns: nothing, a value, one async SDK object, a list
        of them (or, for an async generator, the items' twin)."""
        returns = fn.returns
        if isinstance(returns, ast.Constant) and returns.value is None:
            return "none", None
        if isinstance(returns, ast.Name) and returns.id in self.twins:
            return "one", self.twins[returns.id].name
        if isinstance(returns, ast.Subscript) and isinstance(returns.slice, ast.Name):
            inner, outer = returns.slice.id, ast.unparse(returns.value)
            if inner in self.twins and outer in ("list", "builtins.list", "AsyncIterator"):
                return "list", self.twins[inner].name
        if _mentions(returns, self.twins):
            raise GenerationError(f"{self.where(fn.name)}: returns async objects unwrapped")
        return "value", None


def render(module: str) -> str:
    """The blocking module of the async ``module``: the twins of its classes in ``TWINS``."""
    mine = [t for t in TWINS if t.module == module]
    twins = {t.async_name: t for t in TWINS}
    target = mine[0].blocking_module
    names = _Names(target)
    tree = ast.parse(_source_path(module).read_text())
    # The module's own imports last: where two modules name a thing alike, its own spelling.
    for read in [*dict.fromkeys(t.module for t in TWINS if t.module != module), module]:
        names.read(read, ast.parse(_source_path(read).read_text()))
    for t in TWINS:
        if t.blocking_module != target:
            names.sources[t.name] = f"from {t.blocking_module} import {t.name}"
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    bodies = [_Class(t, classes[t.async_name], twins, names).render() for t in mine]
    defined = {t.name for t in mine}
    exported = ", ".join(f'"{t.name}"' for t in sorted(mine, key=lambda t: t.name))
    doc = (
        f'"""The blocking twin of :mod:`{module}`: {", ".join(t.name for t in mine)}.\n\n'
        "Each method is one call of its async twin through the portal\n"
        f"(:mod:`{PORTAL}`); generated from the async source by ``codegen.blocking``.\n"
        '"""\n'
    )
    imports = "\n".join(names.import_lines(defined))
    source = (
        f"{header(str(_source_path(module).relative_to(ROOT / 'sdk')))}{doc}\n"
        f"from __future__ import annotations\n\n{imports}\n\n__all__ = [{exported}]\n\n\n"
        + "\n\n".join(bodies)
    )
    return python_module(_blocking_path(target), source)


def _blocking_path(module: str) -> Path:
    return Path("sdk", *module.split(".")).with_suffix(".py")


def _output(module: str) -> Output:
    target = next(t.blocking_module for t in TWINS if t.module == module)
    return Output(_blocking_path(target), lambda: render(module))


OUTPUTS = tuple(_output(m) for m in dict.fromkeys(t.module for t in TWINS))
