"""Which line keeps a model's outputs: a static read of the loop around a call site.

The profiler sees that graphs made at a call site stay alive (evidence); this names the line that keeps them, as
a reviewer would: in the loop around the call, the first statement after it that accumulates a value derived from
the call's result into something that outlives the iteration (``outs.append(out)``, ``total += loss``,
``acc = torch.cat([acc, out])``, ``buf[i] = out``). Values passed through ``.item()``, ``.detach()``,
``.tolist()``, ``.numpy()``, ``float()`` or ``int()`` keep no graph and end the trail.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator
from pathlib import Path

MAX_SOURCE_BYTES = 2 * 1024 * 1024
"""Larger files are not read."""
SAFE_METHODS = frozenset({"item", "detach", "tolist", "numpy", "detach_", "cpu_"})
"""Methods whose result keeps no autograd graph."""
SAFE_FUNCTIONS = frozenset({"float", "int", "bool", "len", "str", "print"})
"""Builtins whose result keeps no tensor."""
ACCUMULATING_METHODS = frozenset({"append", "extend", "insert", "add", "update", "add_", "put", "setdefault"})
"""Container methods that keep what they are given."""
ACCUMULATING_CALLS = frozenset({"cat", "stack", "concat", "concatenate", "hstack", "vstack"})
"""``x = torch.cat([x, out])`` grows ``x`` with ``out``."""


def keep_line(file: str, call_line: int) -> int | None:
    """The line after ``call_line`` that keeps the call's result (or a value derived from it), or None."""
    tree = _parse(file)
    if tree is None:
        return None
    found = _enclosing(tree, call_line)
    if found is None:
        return None
    body, statement = found
    taint = _targets(statement)
    if not taint:
        return None
    after = False
    for stmt in _flatten(body):
        if stmt is statement:
            after = True
            continue
        if not after or stmt.lineno <= statement.lineno:
            continue
        line = _keeps(stmt, taint)
        if line is not None:
            return line
    return None


def _parse(file: str) -> ast.Module | None:
    path = Path(file)
    with contextlib.suppress(OSError, ValueError, SyntaxError, RecursionError, MemoryError):
        if path.stat().st_size > MAX_SOURCE_BYTES:
            return None
        return ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    return None


def _enclosing(tree: ast.Module, line: int) -> tuple[list[ast.stmt], ast.stmt] | None:
    """The innermost loop body (else function body) holding the simple statement on ``line``, and that statement."""
    best: tuple[list[ast.stmt], ast.stmt] | None = None

    def visit(body: list[ast.stmt], region: list[ast.stmt] | None) -> None:
        nonlocal best
        for stmt in body:
            end = getattr(stmt, "end_lineno", stmt.lineno) or stmt.lineno
            if not stmt.lineno <= line <= end:
                continue
            inner = _blocks(stmt)
            if not inner:
                if region is not None:
                    best = (region, stmt)
                continue
            if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                for block in inner:
                    visit(block, stmt.body)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(stmt.body, stmt.body)
            else:
                for block in inner:
                    visit(block, region)

    visit(tree.body, tree.body)
    return best


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    blocks = []
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            blocks.append(block)
    for handler in getattr(stmt, "handlers", []) or []:
        blocks.append(handler.body)
    return blocks


def _flatten(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a block in order, nested blocks (if, with, try, inner loops) opened up."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        inner = _blocks(stmt)
        if inner:
            for block in inner:
                yield from _flatten(block)
        else:
            yield stmt


def _targets(stmt: ast.stmt) -> set[str]:
    """Names bound by an assignment statement."""
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    names: set[str] = set()
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and node.id != "_":
                names.add(node.id)
    return names


def _refs(expr: ast.AST | None, taint: set[str]) -> bool:
    """``expr`` uses a tainted name other than through a method or builtin that keeps no graph."""
    if expr is None:
        return False
    if isinstance(expr, ast.Name):
        return expr.id in taint
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in SAFE_METHODS:
            return False
        if isinstance(func, ast.Name) and func.id in SAFE_FUNCTIONS:
            return False
    return any(_refs(child, taint) for child in ast.iter_child_nodes(expr))


def _keeps(stmt: ast.stmt, taint: set[str]) -> int | None:
    """The statement's line when it keeps a tainted value; otherwise extend ``taint`` with what it derives."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        func = call.func
        keeps = isinstance(func, ast.Attribute) and func.attr in ACCUMULATING_METHODS
        if keeps and any(_refs(a, taint) for a in (*call.args, *(k.value for k in call.keywords))):
            return stmt.lineno
        return None
    if isinstance(stmt, ast.AugAssign):
        return stmt.lineno if _refs(stmt.value, taint) else None
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        value = stmt.value
        if not _refs(value, taint):
            return None
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if any(isinstance(t, ast.Subscript) for t in targets):
            return stmt.lineno  # buf[i] = out
        names = _targets(stmt)
        if isinstance(value, ast.BinOp) and _refs(value, names - taint):
            return stmt.lineno  # total = total + loss
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                and value.func.attr in ACCUMULATING_CALLS and _refs(value, names - taint):
            return stmt.lineno  # acc = torch.cat([acc, out])
        taint |= names
    return None
