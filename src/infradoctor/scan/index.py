"""What a file declares, read before the rules run: imports, classes, functions and what they assign.

:func:`index_file` walks the file's statements once (not its expressions) and records, for the value-kind
inference in :mod:`infradoctor.scan.values`:

- import aliases (``import torch as t``), also those inside functions;
- classes with their bases, decorators, methods and the values assigned to ``self.<attr>`` in any method;
- functions and methods with their parameters (and annotations), local assignments, ``return`` values and
  ``global`` declarations;
- module-level assignments, including those under ``if __name__ == "__main__":`` and those made through
  ``global`` in a function.

So a rule can ask what ``self.pipeline`` holds when it was assigned in ``__init__`` through
``self._initialize_pipeline()``, or what a handler's ``global model`` was bound to in ``__main__``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

from infradoctor.scan.knowledge import (
    MODULE_EVIDENCE_METHODS,
    STARTUP_DECORATORS,
    STARTUP_EVENTS,
    STARTUP_KEYWORDS,
    STARTUP_LISTS,
    known_qualname,
)

Value = ast.expr | None
"""An assigned value; None when the assignment is an unpacking whose element is not known."""


@dataclass(eq=False)
class FunctionInfo:
    """A def or async def of the file."""

    node: ast.FunctionDef | ast.AsyncFunctionDef
    """The definition."""
    qualname: str
    """``helper``, ``Predictor.__call__``, ``outer.inner``."""
    cls: ClassInfo | None
    """The class it is a method of."""
    params: dict[str, ast.expr | None]
    """Parameter name -> annotation."""
    assigns: dict[str, list[Value]] = field(default_factory=dict)
    """Local name -> every value assigned to it."""
    returns: list[ast.expr] = field(default_factory=list)
    """Values of its ``return`` statements."""
    globals: set[str] = field(default_factory=set)
    """Names declared ``global``."""
    generator: bool = False
    """It has a ``yield`` statement."""
    parent: FunctionInfo | None = None
    """The enclosing function, for nested defs."""


@dataclass(eq=False)
class ClassInfo:
    """A class of the file."""

    node: ast.ClassDef
    """The definition."""
    name: str
    """Its name."""
    bases: list[str]
    """Dotted base expressions as written (``nn.Module``, ``BaseModel``)."""
    methods: dict[str, FunctionInfo] = field(default_factory=dict)
    """Methods by name."""
    attrs: dict[str, list[tuple[Value, FunctionInfo | None]]] = field(default_factory=dict)
    """``self.<attr>`` -> every value assigned to it, with the method that assigned it (None: class body)."""


@dataclass(eq=False)
class FileIndex:
    """Declarations of one file."""

    aliases: dict[str, str] = field(default_factory=dict)
    """Local name -> qualified name, from every import in the file."""
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    """Classes by name (the last definition wins)."""
    functions: dict[str, FunctionInfo] = field(default_factory=dict)
    """Module-level functions by name."""
    by_node: dict[int, FunctionInfo] = field(default_factory=dict)
    """Every function by ``id()`` of its definition node (the tree outlives the index)."""
    module_assigns: dict[str, list[Value]] = field(default_factory=dict)
    """Module global -> every value assigned to it (at module level, under ``__main__``, or via ``global``)."""
    defined: set[str] = field(default_factory=set)
    """Names defined by def or class at any level."""
    main_guard: bool = False
    """The file has ``if __name__ == "__main__":`` (it is a script)."""
    shadowed: set[str] = field(default_factory=set)
    """Names bound by relative imports (what they are is not known)."""
    module_evidence: set[str] = field(default_factory=set)
    """Names on which a statement calls an ``nn.Module``-only method (``self.model.eval()``): they hold modules."""
    star_modules: list[str] = field(default_factory=list)
    """Modules imported with ``from X import *`` (absolute imports only)."""
    bound: set[str] = field(default_factory=set)
    """Every name assigned or taken as a parameter anywhere in the file (a star import does not reach them)."""
    startup: set[str] = field(default_factory=set)
    """Names of functions and methods that run at start-up or shutdown, not per request: passed as ``lifespan=``/
    ``on_startup=`` to an app, appended to aiohttp's ``app.on_startup``, ``add_event_handler("startup", f)``,
    or decorated ``@app.on_event("startup")``/``@app.before_serving``/Sanic listeners."""

    def function_of(self, node: ast.AST) -> FunctionInfo | None:
        """The index entry of a definition node."""
        return self.by_node.get(id(node))

    def star_resolve(self, key: str) -> str | None:
        """``transformers.pipeline`` for ``pipeline`` after ``from transformers import *``, or None.

        Only a name no statement of the file binds, and only to a name the scan knows.
        """
        head = key.partition(".")[0]
        if head in self.bound or head in self.defined or head in self.shadowed:
            return None
        for module in self.star_modules:
            qual = f"{module}.{key}"
            if known_qualname(qual):
                return qual
        return None


def _dotted(node: ast.AST | None) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    return _dotted(node)


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def _pairs(target: ast.expr, value: Value) -> Iterable[tuple[ast.expr, Value]]:
    """(target, value) pairs of an assignment, unpacking tuples element by element where the value is a tuple."""
    if isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) and not any(
                isinstance(e, ast.Starred) for e in target.elts):
            for t, v in zip(target.elts, value.elts, strict=True):
                yield from _pairs(t, v)
        else:
            for t in target.elts:
                yield from _pairs(t.value if isinstance(t, ast.Starred) else t, None)
        return
    yield target, value


class _Indexer:
    def __init__(self) -> None:
        self.index = FileIndex()

    def run(self, tree: ast.Module) -> FileIndex:
        self.body(tree.body, None, None)
        return self.index

    def body(self, stmts: list[ast.stmt], fn: FunctionInfo | None, cls: ClassInfo | None) -> None:
        for stmt in stmts:
            self.stmt(stmt, fn, cls)

    def stmt(self, node: ast.stmt, fn: FunctionInfo | None, cls: ClassInfo | None) -> None:  # noqa: C901
        index = self.index
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if value is None:
                return
            for target in targets:
                for t, v in _pairs(target, value):
                    self.bind(t, v, fn, cls)
                if isinstance(target, ast.Attribute) and target.attr == "lifespan_context":
                    self.startup_ref(value)  # app.router.lifespan_context = lifespan
            if isinstance(value, ast.Call):
                self.startup_call(value)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            index.defined.add(node.name)
            params: dict[str, ast.expr | None] = {}
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)):
                params[arg.arg] = arg.annotation
            index.bound.update(params)
            if any(_startup_decorator(d) for d in node.decorator_list):
                index.startup.add(node.name)
            owner = cls if fn is None else None
            if owner is not None:
                qual = f"{owner.name}.{node.name}"
            elif fn is not None:
                qual = f"{fn.qualname}.{node.name}"
            else:
                qual = node.name
            info = FunctionInfo(node, qual, owner, params, parent=fn)
            index.by_node[id(node)] = info
            if owner is not None:
                owner.methods[node.name] = info
            elif fn is None:
                index.functions[node.name] = info
            self.body(node.body, info, owner)
        elif isinstance(node, ast.ClassDef):
            index.defined.add(node.name)
            info_cls = ClassInfo(node, node.name, [b for b in map(_dotted, node.bases) if b])
            index.classes[node.name] = info_cls
            self.body(node.body, None, info_cls)
        elif isinstance(node, ast.Return):
            if fn is not None and node.value is not None:
                fn.returns.append(node.value)
        elif isinstance(node, ast.Expr):
            value = node.value
            if fn is not None and isinstance(value, (ast.Yield, ast.YieldFrom)):
                fn.generator = True
            if isinstance(value, ast.Call):
                self.startup_call(value)
            while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
                if value.func.attr in MODULE_EVIDENCE_METHODS:
                    key = _root(value.func.value)
                    if key is not None:
                        index.module_evidence.add(key)
                    break
                value = value.func.value
        elif isinstance(node, ast.Global):
            if fn is not None:
                fn.globals.update(node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    index.aliases[alias.asname] = alias.name
                else:
                    head = alias.name.split(".", 1)[0]
                    index.aliases[head] = head
        elif isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                for alias in node.names:
                    index.shadowed.add(alias.asname or alias.name)
                return
            for alias in node.names:
                if alias.name != "*":
                    index.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                elif node.module not in index.star_modules:
                    index.star_modules.append(node.module)
        elif isinstance(node, ast.If):
            if fn is None and cls is None and _is_main_guard(node.test):
                index.main_guard = True
            self.body(node.body, fn, cls)
            self.body(node.orelse, fn, cls)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            self.body(node.body, fn, cls)
            self.body(node.orelse, fn, cls)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, None, fn, cls)
            self.body(node.body, fn, cls)
        elif isinstance(node, ast.Try) or node.__class__.__name__ == "TryStar":
            self.body(node.body, fn, cls)  # type: ignore[attr-defined]
            for handler in node.handlers:  # type: ignore[attr-defined]
                self.body(handler.body, fn, cls)
            self.body(node.orelse, fn, cls)  # type: ignore[attr-defined]
            self.body(node.finalbody, fn, cls)  # type: ignore[attr-defined]
        elif isinstance(node, ast.Match):
            for case in node.cases:
                self.body(case.body, fn, cls)

    def startup_ref(self, node: ast.expr | None) -> None:
        """Record the function a start-up registration names (``lifespan``, ``self.load``, a list of them)."""
        if isinstance(node, (ast.List, ast.Tuple)):
            for element in node.elts:
                self.startup_ref(element)
        elif isinstance(node, ast.Name):
            self.index.startup.add(node.id)
        elif isinstance(node, ast.Attribute):
            self.index.startup.add(node.attr)

    def startup_call(self, call: ast.Call) -> None:
        """Start-up registrations in a call.

        ``FastAPI(lifespan=f)``, ``app.on_startup.append(f)``, ``app.add_event_handler("startup", f)``, also one
        call deep (``serve.ingress(FastAPI(lifespan=f))``).
        """
        func = call.func
        for kw in call.keywords:
            if kw.arg in STARTUP_KEYWORDS:
                self.startup_ref(kw.value)
        if isinstance(func, ast.Attribute):
            if func.attr == "append" and isinstance(func.value, ast.Attribute) and func.value.attr in STARTUP_LISTS:
                for arg in call.args:
                    self.startup_ref(arg)
            elif func.attr == "add_event_handler" and len(call.args) >= 2 and isinstance(
                    call.args[0], ast.Constant) and call.args[0].value in STARTUP_EVENTS:
                self.startup_ref(call.args[1])
        for arg in call.args:
            if isinstance(arg, ast.Call):
                for kw in arg.keywords:
                    if kw.arg in STARTUP_KEYWORDS:
                        self.startup_ref(kw.value)

    def bind(self, target: ast.expr, value: Value, fn: FunctionInfo | None, cls: ClassInfo | None) -> None:
        index = self.index
        if isinstance(target, ast.Name):
            name = target.id
            index.bound.add(name)
            if fn is None:
                if cls is None:
                    index.module_assigns.setdefault(name, []).append(value)
                else:
                    cls.attrs.setdefault(name, []).append((value, None))
            elif name in fn.globals:
                index.module_assigns.setdefault(name, []).append(value)
            else:
                fn.assigns.setdefault(name, []).append(value)
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and fn is not None:
            owner = fn.cls
            parent = fn.parent
            while owner is None and parent is not None:  # a nested def inside a method still sees self
                owner, parent = parent.cls, parent.parent
            if owner is not None and target.value.id in ("self", "cls"):
                owner.attrs.setdefault(target.attr, []).append((value, fn))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t, v in _pairs(target, value):
                self.bind(t, v, fn, cls)


def _startup_decorator(dec: ast.expr) -> bool:
    """``@app.on_event("startup")``, ``@app.listener("before_server_start")``, ``@app.before_serving``."""
    if isinstance(dec, ast.Call):
        func = dec.func
        if isinstance(func, ast.Attribute) and func.attr in ("on_event", "listener", "register_listener") and (
                dec.args and isinstance(dec.args[0], ast.Constant) and dec.args[0].value in STARTUP_EVENTS):
            return True
        dec = func
    return isinstance(dec, ast.Attribute) and dec.attr in STARTUP_DECORATORS


def index_file(tree: ast.Module) -> FileIndex:
    """The declarations of a parsed module."""
    return _Indexer().run(tree)
