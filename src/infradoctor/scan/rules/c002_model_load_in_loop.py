"""C002 model-load-in-loop: the same model is loaded again on every iteration of a loop.

What it detects:
    A model or weights load (``torch.load``, ``torch.jit.load``, ``torch.hub.load``, ``*.from_pretrained``,
    ``*.load_state_dict``, ``transformers.pipeline``, pretrained torchvision models, ``joblib.load`` ...) inside a
    ``for``/``while`` loop or comprehension, whose arguments do not depend on the loop: no name bound by the loop
    header or assigned inside the loop appears in the call.

Why it matters:
    Loading is the most expensive thing a model does: disk reads, unpickling, allocation, a copy to the GPU. Doing
    it per iteration multiplies start-up cost by the iteration count and churns memory.

How it is measured:
    Statically: the loop's target names and the names assigned in its body are tracked while the body is
    visited; a load whose arguments mention one of them loads a different thing each time (several checkpoints,
    an ensemble) and is not reported. Retry loops (a ``while`` loop that ``break``s or ``return``s) and lazy
    initialisation guards (``if model is None:``) are not reported. Building modules (``nn.Sequential``, local
    ``nn.Module`` classes) in a loop is how layers are made and is not reported.

Fix:
    Hoist the load out of the loop and reuse the loaded model.
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan.visitor import CallInfo, FileContext, names_in

RULE = Rule(
    "C002",
    "model-load-in-loop",
    Severity.HIGH,
    "Model loaded inside a loop",
    fix="Hoist the load out of the loop.",
    risk="None.",
    commands=("scan",),
)


def check_model_load(call: CallInfo, ctx: FileContext) -> None:
    """Report a loop-invariant load inside a loop."""
    kind = call.load_kind or ""
    if kind.startswith("build") or not ctx.loops or ctx.scope.guards:
        return
    varying: set[str] = set()
    for frame in ctx.loops:
        varying |= frame.targets | frame.assigned
    node = call.node
    used = set()
    for part in (*node.args, *(kw.value for kw in node.keywords), node.func):
        used |= names_in(part)
    if used & varying:
        return
    for frame in ctx.loops:
        if isinstance(frame.node, ast.While) and any(
                isinstance(n, (ast.Break, ast.Return)) for stmt in frame.node.body for n in ast.walk(stmt)):
            return
    ctx.report(
        RULE.code,
        node,
        f"model loaded inside a loop ({kind}) with the same arguments each iteration; hoist it out of the loop",
        {"call": kind, "loop_line": getattr(ctx.loops[-1].node, "lineno", None)},
    )
