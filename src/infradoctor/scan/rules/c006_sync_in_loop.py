"""C006 sync-in-loop: a host-device sync (``.item()``, ``print(tensor)`` ...) runs on every iteration of a hot loop.

What it detects:
    In PyTorch code that places work on a device, ``x.item()`` or ``print()`` of a model output or loss inside a
    loop whose own body does model work (a model call, ``.backward()``, ``zero_grad()``, an optimizer ``step()``),
    or inside a loop nested in such a body; also ``x.cpu()``, ``x.numpy()`` and ``x.tolist()`` (no arguments)
    when the host value is computed with there and then (arithmetic, comparisons, formatting, printing).

Why it matters:
    On a GPU each of these waits for every queued kernel to finish and copies to the host: the CPU stops feeding
    the GPU, the launch queue drains and the GPU idles once per iteration (P005 at run time).

How it is measured:
    Statically. Syncs are held per loop while the loop body is visited and judged when the loop ends: reported if
    the loop's own body was hot; dropped if only a loop inside it was (an epoch loop's body runs once per epoch);
    otherwise passed to the enclosing loop. A chain like ``x.cpu().numpy()`` is one report. Not reported: calls
    under a periodic or once-only guard (``if step % 100 == 0:``, ``if i == 0:``), in a loop's exit condition (a
    ``while`` test, the test of an ``if`` that breaks or returns: the value decides whether to go on), tensors
    built on the host (``torch.tensor(list)``, results of ``.cpu()``), moving results to the host to keep them
    (``outputs.append(out.detach().cpu())``, assigned, returned, put in a list or written out: C008's own advice),
    modules (``model.cpu()``), files that never place anything on a device (CPU-only scripts, where a sync costs
    nothing), and test code.

Fix:
    Keep values on the device inside the loop (accumulate with ``total += loss.detach()``) and call ``.item()``
    once after the loop, or only every N steps.
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan import values as V
from infradoctor.scan.context import CallInfo, FileContext, Hit, LoopFrame

RULE = Rule(
    "C006",
    "sync-in-loop",
    Severity.MEDIUM,
    "Host sync (.item()/.cpu()/...) inside a loop",
    fix="Accumulate on the device and convert once after the loop.",
    risk="Progress shows later.",
    commands=("scan",),
)
CALL_NAMES = K.HOST_SYNCS | {"print"}
COMPUTE_SINKS = frozenset({None, "", "print", "float", "int", "bool", "round", "str", "abs", "sum", "max", "min",
                           "len", "format", "add_scalar", "log", "info", "debug", "warning", "set_postfix",
                           "set_description", "isfinite", "isnan", "any", "all"})
"""Where a ``.cpu()``/``.numpy()``/``.tolist()`` value is computed with, printed or logged there and then (a
statement of its own, an ``if`` test, arithmetic). Anywhere else (assigned, appended, returned, iterated, handed to
a function) the value is moved to the host to be kept or written out: the extraction C008 recommends."""
_MODULE_METHODS = frozenset({"parameters", "named_parameters", "state_dict", "modules", "children", "buffers",
                             "eval", "train", "load_state_dict", "named_modules"})


def _tensor_names(call: CallInfo, ctx: FileContext) -> list[str]:
    kinds = ctx.scope.kinds
    names: list[str] = []
    for arg in call.node.args:
        parts = [v.value for v in arg.values if isinstance(v, ast.FormattedValue)] if isinstance(
            arg, ast.JoinedStr) else [arg]
        names.extend(p.id for p in parts if isinstance(p, ast.Name) and kinds.get(p.id) in V.GRAPH_KINDS)
    return names


def _on_host(receiver: ast.expr, ctx: FileContext) -> bool:
    """The tensor is built on the host (``torch.tensor(xs)``, ``t.cpu()``): reading it needs no device sync."""
    node = receiver
    while isinstance(node, (ast.Call, ast.Subscript, ast.Attribute, ast.BinOp)):
        if isinstance(node, ast.BinOp):
            return _on_host(node.left, ctx) and _on_host(node.right, ctx)
        kind = ctx.kind_of(node) if isinstance(node, ast.Call) else None
        if kind == V.HOST:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        elif isinstance(node, ast.Call):
            return False
        else:
            node = node.value
    return isinstance(node, ast.Name) and ctx.kind_of(node) == V.HOST


def check(call: CallInfo, ctx: FileContext) -> None:
    """Hold a sync made inside a loop until the loop is known to be hot."""
    scope = ctx.scope
    if not ctx.uses_torch or not ctx.loops or scope.once_guards or scope.exit_tests:
        return
    covered: set[int] = ctx.data.setdefault(RULE.code, set())
    if id(call.node) in covered:
        return
    if call.name == "print":
        if call.receiver is not None or call.qualname != "builtins.print":
            return
        names = _tensor_names(call, ctx)
        if not names:
            return
        what = f"print({names[0]})"
    else:
        receiver = call.receiver
        if receiver is None or call.node.args or (call.node.keywords and call.name != "numpy"):
            return
        if call.outer_method in _MODULE_METHODS or (call.receiver_key or "").lower().endswith("module") or (
                ctx.is_model_expr(receiver)):
            return  # `model.cpu()`, `m.cpu().parameters()`: moves a module, not a tensor read
        inner = receiver
        while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in CALL_NAMES:
            covered.add(id(inner))
            inner = inner.func.value
        if call.name != "item" and ctx.sink not in COMPUTE_SINKS:
            return  # results moved to the host to keep them: the fix C008 recommends
        if _on_host(receiver, ctx):
            return
        what = f".{call.name}()"
    hit = ctx.make_hit(
        RULE.code, call.node, f"{what} syncs with the device on every iteration of a hot loop; keep values on the "
        "device and convert once after the loop", {"call": what},
    )
    ctx.loops[-1].pending.append(hit)


def loop_end(frame: LoopFrame, ctx: FileContext) -> None:
    """Report held syncs of a loop whose own body is hot; drop them where only an inner loop is; else pass up."""
    if not frame.pending:
        return
    if frame.direct_hot:
        held: list[Hit] = ctx.data.setdefault(RULE.code + ":hot", [])
        held.extend(frame.pending)
    elif not frame.hot and ctx.loops:
        ctx.loops[-1].pending.extend(frame.pending)
    frame.pending = []


def file_end(ctx: FileContext) -> None:
    """Report the held syncs if the file places work on a device (a CPU-only script's syncs cost nothing)."""
    held: list[Hit] = ctx.data.get(RULE.code + ":hot", [])
    if held and ctx.uses_device is not None:
        for hit in held:
            hit.evidence["device_line"] = ctx.uses_device
        ctx.hits.extend(held)
