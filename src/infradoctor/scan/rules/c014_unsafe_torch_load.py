"""C014 unsafe-torch-load: ``torch.load`` can run arbitrary code from the file it reads.

What it detects:
    ``torch.load(...)`` (through any alias, e.g. ``from torch import load as tl``), or a library wrapper that
    defaults to ``weights_only=False`` (ultralytics' ``torch_load``), without ``weights_only=True``,
    or with ``weights_only=False`` (reported at low severity: a reviewed decision, the risk remains). A load of
    bytes from a request (``torch.load(io.BytesIO(data))`` in a request handler) is high severity: that is remote
    code execution. Not reported when ``weights_only`` is a variable or ``**kwargs`` is passed; when the file was
    written by the same function (passed to ``torch.save``/``*.save`` before, or to a function of the same file
    that saves checkpoints, such as ``split_files(src, tmp_dir)``) or lives under a test's temporary
    directory (``tmp_path``, ``tmpdir``); and in the fallback branch of ``except TypeError:`` around a load that
    passes ``weights_only`` (an old torch that rejects the keyword); inside ``with
    torch.serialization.safe_globals([...]):``, which allow-lists classes for the weights-only loader that torch
    2.6 uses by default (the code is written for it).

Why it matters:
    Without ``weights_only=True``, ``torch.load`` unpickles: a crafted checkpoint runs any code on load.
    Checkpoints downloaded from a hub or shared storage are untrusted input. torch 2.6 changed the default to
    True; code that relies on the old default behaves differently across versions.

How it is measured:
    Statically, from the call's keywords and what the function does with the result. ``--fix`` adds
    ``weights_only=True`` only where that is safe: the loaded object is used as a state dict (passed to
    ``load_state_dict``, iterated with ``.items()``, its keys renamed or deleted). Where the code reads entries
    out of it (``ckpt["state_dict"]``, ``ckpt["model"].float()``, ``ckpt["epoch"]``) it is a training checkpoint,
    which often pickles objects (a whole module, an ``argparse.Namespace``, Lightning callbacks), and
    ``weights_only=True`` would refuse the file; where it is returned or handed elsewhere, what it holds is not
    known. Those fixes are marked unsafe and applied only with ``--unsafe-fixes``.

Fix:
    ``torch.load(path, weights_only=True)``. Checkpoints that pickle custom classes need
    ``torch.serialization.add_safe_globals([...])``, or re-saving as a state dict or safetensors.
"""

from __future__ import annotations

import ast
from typing import Any

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan.context import CallInfo, Edit, FileContext, Hit, Scope, names_in
from infradoctor.scan.index import FunctionInfo
from infradoctor.scan.syntax import dotted, is_const

RULE = Rule(
    "C014",
    "unsafe-torch-load",
    Severity.MEDIUM,
    "torch.load without weights_only=True",
    fix="Pass weights_only=True (the default from torch 2.6).",
    risk="Checkpoints that pickle custom objects need torch.serialization.add_safe_globals.",
    commands=("scan",),
)
CALL_NAMES = frozenset({"load"} | {q.rsplit(".", 1)[-1] for q in K.TORCH_LOAD_WRAPPERS})
NODES = (ast.Try, ast.With)
SAFE_GLOBALS = frozenset({"torch.serialization.safe_globals", "torch.serialization.add_safe_globals"})
"""Allow-listing classes for the weights-only unpickler: the code is written for weights-only loading."""
FIX_DESCRIPTION = "added weights_only=True to torch.load(...)"
OUTPUT_KEYWORDS = frozenset({"output_dir", "out_dir", "output_path", "out_path", "save_dir", "save_path",
                             "output_file", "out_file", "checkpoint_dir_out", "dst", "destination"})
"""Keyword arguments through which a call writes files (``convert_checkpoint(..., output_dir=out_dir)``)."""
TEMP_NAMES = frozenset({"tmp_path", "tmpdir", "tmp_dir", "tmp_path_factory", "temp_dir", "tmpdirname",
                        "tmp_dir_name"})
"""Names of test temporary directories: a file there was written by the test itself."""
STATE_DICT_CONSUMERS = frozenset({"load_state_dict", "set_state_dict", "set_model_state_dict", "load_model_dict",
                                  "update"})
"""Calls that take a state dict."""
STATE_DICT_METHODS = frozenset({"items", "keys", "values"})
"""Methods that read a mapping of tensors."""
NEUTRAL_CALLS = frozenset({"len", "isinstance", "type", "id", "sorted", "list"})
"""Calls that look at a loaded mapping without needing what is in it."""


def check_node(node: ast.AST, ctx: FileContext) -> None:
    """Note ``except TypeError:`` fallbacks around a load with ``weights_only``, and ``safe_globals`` blocks."""
    if isinstance(node, ast.With):
        if any(ctx.resolve_expr(item.context_expr) in SAFE_GLOBALS for item in node.items):
            allowed: list[tuple[int, int]] = ctx.data.setdefault(RULE.code + ":fallback", [])
            allowed.append((node.lineno, node.end_lineno or node.lineno))
        return
    if not isinstance(node, ast.Try):
        return
    handlers = [h for h in node.handlers if h.type is not None and "TypeError" in names_in(h.type)]
    if not handlers:  # most try statements catch something else: no need to look into the body
        return
    loads_with_keyword = any(
        isinstance(n, ast.Call) and any(kw.arg == "weights_only" for kw in n.keywords)
        for stmt in node.body for n in ast.walk(stmt))
    if not loads_with_keyword:
        return
    fallbacks: list[tuple[int, int]] = ctx.data.setdefault(RULE.code + ":fallback", [])
    for handler in handlers:
        fallbacks.append((handler.lineno, handler.end_lineno or handler.lineno))


def _written_here(call: CallInfo, ctx: FileContext) -> bool:
    """The loaded file was written earlier in this function, or is under a test's temporary directory.

    Written: passed to ``torch.save``/``*.save``/``save_checkpoint``, or to a call's ``output_dir=``-like keyword
    (a conversion that writes the checkpoint it then reloads).
    """
    if not call.node.args:
        return False
    path = call.node.args[0]
    scope = ctx.scope
    roots = names_in(path) - {"self", "os", "Path", "str"}
    used = set(roots)
    frontier = set(roots)
    for _ in range(4):  # `for f in files` <- `files = glob(join(tmp, "*.bin"))` <- `tmp`: a few steps back
        frontier = {d for name in frontier for d in scope.deps.get(name, ())} - used
        if not frontier:
            break
        used |= frontier
    if used & TEMP_NAMES:
        return True
    if (not roots and not isinstance(path, ast.Constant)) or scope.node is None or scope.kind == "class":
        return False
    text = ast.unparse(path)
    line = call.node.lineno
    body: list[ast.stmt] = scope.node.body if isinstance(scope.node, ast.Module) else [scope.node]  # type: ignore[list-item]
    for node in (n for stmt in body if stmt.lineno <= line for n in ast.walk(stmt)):
        if not isinstance(node, ast.Call) or node.lineno >= line:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        targets: list[ast.expr] = []
        if name in ("save", "save_checkpoint", "save_file"):
            targets = [*node.args, *(kw.value for kw in node.keywords)]
        targets += [kw.value for kw in node.keywords if kw.arg in OUTPUT_KEYWORDS]
        for target in targets:
            if ast.unparse(target) == text or (isinstance(target, (ast.Name, ast.Attribute)) and names_in(target)
                                               & roots):
                return True
        if isinstance(node.func, ast.Name) and _written_by_helper(node, used, ctx):
            return True  # `split_files(src, tmp_dir)`, a function of this file that torch.saves into tmp_dir
    return False


def _written_by_helper(node: ast.Call, used: set[str], ctx: FileContext) -> bool:
    """The call hands one of ``used`` to a parameter that a function of this file saves checkpoints into."""
    name = node.func.id  # type: ignore[attr-defined]
    fn = ctx.index.functions.get(name)
    if fn is None or name in ctx.index.shadowed:
        return False
    saved = _saved_params(fn, ctx)
    if not saved:
        return False
    params = [a.arg for a in (*fn.node.args.posonlyargs, *fn.node.args.args)]
    handed = [(params[i], a) for i, a in enumerate(node.args[:len(params)])]
    handed += [(kw.arg, kw.value) for kw in node.keywords if kw.arg]
    return any(param in saved and isinstance(arg, ast.Name) and arg.id in used for param, arg in handed)


def _saved_params(fn: FunctionInfo, ctx: FileContext) -> frozenset[str]:
    """Parameters of ``fn`` that a path it saves a checkpoint to is built from.

    The paths of its ``torch.save``/``save_file``/``save_checkpoint`` calls, through its local assignments.
    """
    cache: dict[int, frozenset[str]] = ctx.data.setdefault(RULE.code + ":saves", {})
    found = cache.get(id(fn.node))
    if found is None:
        names: set[str] = set()
        for n in ast.walk(fn.node):
            if isinstance(n, ast.Call) and (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(
                    n.func, "id", "")) in ("save", "save_file", "save_checkpoint"):
                for arg in (*n.args[1:], *(kw.value for kw in n.keywords)):
                    names |= names_in(arg)
        for _ in range(3):  # `path = os.path.join(tmp_path, name); torch.save(sd, path)`
            more = {m for name in names for value in fn.assigns.get(name, ()) if value is not None
                    for m in names_in(value)}
            if more <= names:
                break
            names |= more
        found = frozenset(names & set(fn.params))
        cache[id(fn.node)] = found
    return found


def _from_request(call: CallInfo, ctx: FileContext) -> bool:
    """``torch.load(io.BytesIO(data))`` in a request handler: bytes from the request are unpickled."""
    scope = ctx.scope
    if scope.handler is None or not call.node.args:
        return False
    arg = call.node.args[0]
    return isinstance(arg, ast.Call) and (dotted(arg.func) or "").rsplit(".", 1)[-1] == "BytesIO"


def check(call: CallInfo, ctx: FileContext) -> None:
    """Report torch.load without weights_only=True."""
    qual = call.qualname
    wrapper = K.TORCH_LOAD_WRAPPERS.get(qual or "")
    if (qual != "torch.load" and wrapper is None) or call.has_star_kwargs:
        return
    line = call.node.lineno
    if any(start <= line <= end for start, end in ctx.data.get(RULE.code + ":fallback", [])):
        return
    if _written_here(call, ctx):
        return
    kw = call.keyword("weights_only")
    request = _from_request(call, ctx)
    severity = Severity.HIGH if request else None
    evidence: dict[str, Any] = {"weights_only": None}
    if request:
        evidence["source"] = "request data"
    if kw is None:
        node = call.node
        parts: list[ast.expr] = [*node.args, *(k.value for k in node.keywords)]
        edit = None
        if parts:
            last = max(parts, key=lambda p: (p.end_lineno or 0, p.end_col_offset or 0))
            if last.end_lineno is not None and last.end_col_offset is not None:
                edit = Edit(last.end_lineno, last.end_col_offset, ", weights_only=True", FIX_DESCRIPTION, safe=False)
        message = ("torch.load() of bytes from the request unpickles whatever the client sends (remote code "
                   "execution); pass weights_only=True" if request else
                   "torch.load() without weights_only=True unpickles arbitrary code; pass weights_only=True")
        if wrapper is not None:
            evidence["wrapper"] = qual
            message = (f"{wrapper} defaults to weights_only=False and unpickles arbitrary code; pass "
                       "weights_only=True")
        hit = ctx.make_hit(RULE.code, node, message, evidence, edit=edit, severity=severity)
        ctx.hits.append(hit)
        if edit is not None:
            _judge_fix_later(call, ctx, hit)
    elif is_const(kw.value, False) and not ctx.is_test:  # a test's explicit choice, on files it wrote
        evidence["weights_only"] = False
        ctx.report(RULE.code, call.node, "torch.load(weights_only=False) unpickles arbitrary code from the file",
                   evidence, severity=severity or Severity.LOW)


def _judge_fix_later(call: CallInfo, ctx: FileContext, hit: Hit) -> None:
    """The fix is safe where the result is used as a state dict; that is known when the function ends."""
    sink = ctx.sink
    if sink in STATE_DICT_CONSUMERS:
        _fix_safety(hit, True)
        return
    if sink == "assign" and call.assigned_to and all("." not in k for k in call.assigned_to):
        held: list[tuple[list[str], Hit]] = ctx.scope.data.setdefault(RULE.code, [])
        held.append((call.assigned_to, hit))
        return
    _fix_safety(hit, False)


def _fix_safety(hit: Hit, safe: bool) -> None:
    if hit.edit is not None:
        hit.edit.safe = safe
    hit.evidence["fix"] = "safe" if safe else "unsafe"


def scope_end(scope: Scope, ctx: FileContext) -> None:
    """Judge the fixes of the loads assigned in this function by how the loaded objects are used."""
    held: list[tuple[list[str], Hit]] | None = scope.data.get(RULE.code)
    if not held or scope.node is None:
        return
    parents = _parents(scope.node)
    for names, hit in held:
        _fix_safety(hit, all(_used_as_state_dict(name, hit.line, scope.node, parents) for name in names))


def _parents(root: ast.AST) -> dict[int, ast.AST]:
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(root):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    return parents


def _used_as_state_dict(name: str, after: int, root: ast.AST, parents: dict[int, ast.AST], depth: int = 0) -> bool:
    """Every later read of ``name`` in the function treats the whole object as a mapping of tensors.

    Reading an entry (``ckpt["state_dict"]``, ``ckpt["model"]``, ``ckpt["epoch"]``) says the file is a training
    checkpoint, which often pickles objects besides tensors (``argparse.Namespace``, Lightning callbacks, whole
    modules): ``weights_only=True`` would refuse the whole file, whatever entry the code reads.
    """
    if depth > 2:
        return False
    uses = [n for n in ast.walk(root) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
            and n.lineno >= after]
    if not uses:
        return False  # loaded and never used here: returned or kept elsewhere, not known
    return all(_state_dict_use(use, root, parents, depth) for use in uses)


def _state_dict_use(node: ast.AST, root: ast.AST, parents: dict[int, ast.AST], depth: int) -> bool:
    """The loaded object at ``node`` is used as a state dict (passed on whole, iterated, its keys edited)."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.Call):
        callee = parent.func
        name = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
        return node is not callee and (name in STATE_DICT_CONSUMERS or name in NEUTRAL_CALLS)
    if isinstance(parent, ast.Attribute):
        grand = parents.get(id(parent))
        return isinstance(grand, ast.Call) and grand.func is parent and parent.attr in STATE_DICT_METHODS | {"pop"}
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return isinstance(parent.ctx, (ast.Store, ast.Del))  # `sd[new] = ...`, `del sd[k]`: editing the keys
    if isinstance(parent, (ast.Compare, ast.Delete)):
        return True  # `"state_dict" in sd`
    if isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1 and isinstance(
            parent.targets[0], ast.Name):
        return _used_as_state_dict(parent.targets[0].id, parent.lineno + 1, root, parents, depth + 1)
    return False
