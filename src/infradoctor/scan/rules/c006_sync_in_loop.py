"""C006 sync-in-loop: a host-device sync (``.item()``, ``.cpu()``, ``print(tensor)`` ...) runs in a hot loop.

What it detects:
    In PyTorch code, ``x.item()``, ``x.cpu()``, ``x.numpy()``, ``x.tolist()`` (no arguments) or ``print()`` of a
    model output or loss, inside a loop that does model work: the loop (or a loop around it, in the same function)
    calls a model, ``.backward()``, ``zero_grad()`` or an optimizer ``step()``. Calls under a periodic guard
    (``if step % 100 == 0:``) are not reported: that is the fix.

Why it matters:
    On a GPU each of these waits for every queued kernel to finish and copies to the host: the CPU stops feeding
    the GPU, the launch queue drains and the GPU idles once per iteration (P005 at run time).

How it is measured:
    Statically. Syncs are held per loop while the loop body is visited and reported when the loop ends, if the
    loop turned out to be hot; otherwise they move to the enclosing loop. A chain like ``x.cpu().numpy()`` is one
    report.

Fix:
    Keep values on the device inside the loop (accumulate with ``total += loss.detach()``) and call ``.item()``
    once after the loop, or only every N steps.
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan.visitor import CallInfo, FileContext, LoopFrame

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
_MODULE_METHODS = frozenset({"parameters", "named_parameters", "state_dict", "modules", "children", "buffers",
                             "eval", "train", "load_state_dict", "named_modules"})


def _tensor_names(call: CallInfo, ctx: FileContext) -> list[str]:
    values = ctx.scope.values
    names: list[str] = []
    for arg in call.node.args:
        parts = [v.value for v in arg.values if isinstance(v, ast.FormattedValue)] if isinstance(
            arg, ast.JoinedStr) else [arg]
        names.extend(p.id for p in parts if isinstance(p, ast.Name) and p.id in values)
    return names


def check(call: CallInfo, ctx: FileContext) -> None:
    """Hold a sync made inside a loop until the loop is known to be hot."""
    if not ctx.uses_torch or not ctx.loops or ctx.scope.modulo_guards:
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
        if call.receiver is None or call.node.args or (call.node.keywords and call.name != "numpy"):
            return
        if call.outer_method in _MODULE_METHODS or (call.receiver_key or "").lower().endswith("module") or (
                ctx.is_model_expr(call.receiver)):
            return  # `model.cpu()`, `m.cpu().parameters()`: moves a module, not a tensor read
        inner = call.receiver
        while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in CALL_NAMES:
            covered.add(id(inner))
            inner = inner.func.value
        what = f".{call.name}()"
    hit = ctx.make_hit(
        RULE.code, call.node, f"{what} syncs with the device on every iteration of a hot loop; keep values on the "
        "device and convert once after the loop", {"call": what},
    )
    ctx.loops[-1].pending.append(hit)


def loop_end(frame: LoopFrame, ctx: FileContext) -> None:
    """Report held syncs of a hot loop; pass them to the enclosing loop otherwise."""
    if not frame.pending:
        return
    if frame.hot:
        ctx.hits.extend(frame.pending)
    elif ctx.loops:
        ctx.loops[-1].pending.extend(frame.pending)
    frame.pending = []
