"""The roles of functions and blocks: which disable autograd, which serve requests, which tests run once.

Used by the visitor when it enters a function (decorators), a ``with`` block or an ``if``.
"""

from __future__ import annotations

import ast

from infradoctor.scan import knowledge as K
from infradoctor.scan.context import FileContext, Scope
from infradoctor.scan.syntax import dotted, names_in, root_key

__all__ = ["disables_grad", "lazy_guard", "once_test", "route_decorator"]

_GUARD_OPS = (ast.Is, ast.IsNot, ast.In, ast.NotIn)
_FILLERS = frozenset({"setdefault", "update", "append", "add", "__setitem__", "extend", "insert"})


def disables_grad(dec: ast.expr, qual: str | None, ctx: FileContext, cache: dict[str, bool]) -> bool:
    """``@torch.no_grad()``, ``@torch.inference_mode()``, or a project's own decorator that applies one."""
    if qual in K.GRAD_DISABLERS:
        return True
    key = dotted(dec.func if isinstance(dec, ast.Call) else dec)
    if key is None:
        return False
    name = key.rsplit(".", 1)[-1]
    info = ctx.index.functions.get(key)
    if info is not None:
        cached = cache.get(key)
        if cached is None:
            cached = any(ctx.resolve(dotted(n)) in K.GRAD_DISABLERS for n in ast.walk(info.node)
                         if isinstance(n, (ast.Name, ast.Attribute)))
            cache[key] = cached
        return cached
    return K.GRAD_DISABLER_NAME_RE.search(name) is not None


def route_decorator(dec: ast.expr, ctx: FileContext) -> str | None:
    """Framework name when ``dec`` is a route decorator such as ``@app.post("/predict")``."""
    if not isinstance(dec, ast.Call) or not isinstance(dec.func, ast.Attribute):
        return None
    if dec.func.attr not in K.ROUTE_DECORATORS:
        return None
    base = dotted(dec.func.value)
    ctor = ctx.app_vars.get(base or "")
    if ctor is not None:
        return ctor.split(".", 1)[0]
    if not ctx.frameworks:
        return None
    path: ast.AST | None = dec.args[0] if dec.args else None
    if path is None:
        for kw in dec.keywords:
            if kw.arg in ("path", "rule", "uri"):
                path = kw.value
    if isinstance(path, ast.Constant) and isinstance(path.value, str) and (
            path.value.startswith("/") or path.value == ""):
        return sorted(ctx.frameworks)[0]
    return None


def once_test(test: ast.expr, scope: Scope) -> bool:
    """``if step % N == 0:`` (every N steps) or ``if i == 0:``/``if rank == r:`` (once per loop)."""
    for sub in ast.walk(test):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mod):
            return True
        if isinstance(sub, ast.Compare) and any(isinstance(op, ast.Eq) for op in sub.ops):
            loop_names = set().union(*(f.targets for f in scope.loops))
            if names_in(sub) & loop_names:
                return True
    return False


def lazy_guard(node: ast.If, ctx: FileContext) -> bool:
    """``if model is None: model = load()``: a lazy-initialisation guard, whose body runs once.

    The test has the shape of one (``not x``, ``x is None``, ``k not in cache``, ``hasattr(self, "m")``) and the
    body sets what it tests: assigns it, fills it (``cache[k] = ...``, ``cache.setdefault``), or calls a function of
    the file that assigns it (``global model`` in a loader, ``self._load()`` setting ``self.model``). A test that
    only looks like one (``if ext in ALLOWED:``) guards nothing: a load under it runs on every request.
    """
    test = node.test
    if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) or (
            isinstance(test, ast.Compare) and any(isinstance(op, _GUARD_OPS) for op in test.ops)) or (
            isinstance(test, ast.Call) and dotted(test.func) in ("hasattr", "getattr"))):
        return False
    tested = _tested(test)
    if not tested:
        return False
    for stmt in node.body:
        for sub in ast.walk(stmt):
            if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                if any(_sets(root_key(t), tested) for t in targets):
                    return True
            elif isinstance(sub, ast.Call) and _call_sets(sub, tested, ctx):
                return True
    return False


def _tested(test: ast.expr) -> set[str]:
    keys: set[str] = set()
    for sub in ast.walk(test):
        if isinstance(sub, ast.Call) and dotted(sub.func) in ("hasattr", "getattr") and len(sub.args) >= 2 and (
                isinstance(sub.args[1], ast.Constant) and isinstance(sub.args[1].value, str)):
            base = dotted(sub.args[0])
            if base is not None:
                keys.add(f"{base}.{sub.args[1].value}")
        elif isinstance(sub, (ast.Name, ast.Attribute)):
            key = dotted(sub)
            if key is not None:
                keys.add(key)
    return keys - {"self", "cls", "None", "hasattr", "getattr"}


def _sets(key: str | None, tested: set[str]) -> bool:
    if key is None or key in ("self", "cls"):
        return False
    return any(key == t or t.startswith(key + ".") or key.startswith(t + ".") for t in tested)


def _call_sets(call: ast.Call, tested: set[str], ctx: FileContext) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _FILLERS and _sets(root_key(func.value), tested):
        return True  # cache.setdefault(key, load())
    index = ctx.index
    if isinstance(func, ast.Name):
        fn = index.functions.get(func.id)
        return fn is not None and bool(fn.globals & tested)  # a loader that sets `global model`
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
        cls = ctx.env.cls
        method = ctx.values.method(cls, func.attr) if cls is not None else None
        if method is None or cls is None:
            return False
        return any(fn is method and _sets(f"self.{attr}", tested)
                   for attr, assigned in cls.attrs.items() for _value, fn in assigned)
    return False
