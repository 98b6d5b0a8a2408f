"""The roles of functions and blocks: which disable autograd, which serve requests, which tests run once.

Used by the visitor when it enters a function (decorators), a ``with`` block or an ``if``.
"""

from __future__ import annotations

import ast

from infradoctor.scan import knowledge as K
from infradoctor.scan.context import FileContext, Scope
from infradoctor.scan.syntax import dotted, names_in

__all__ = ["disables_grad", "once_test", "route_decorator"]


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
