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
    visited (tuple targets included: ``cmd, msg = receive()``); a load whose arguments mention one of them loads a
    different thing each time (several checkpoints, an ensemble, a message) and is not reported. Not reported
    either: retry loops (a ``while`` loop that ``break``s or ``return``s, or whose condition reads a name set in
    the loop: ``while not service: service = load(...)``), lazy initialisation guards (``if model is None:``),
    once-per-process guards (``for rank in range(world): if global_rank == rank: load(...)``), loops that train
    (a model reloaded fresh for each cross-validation fold or run), and tokenizers or processors. Building modules
    (``nn.Sequential``, local ``nn.Module`` classes) in a loop is how layers are made and is not reported.

    Preview (off by default; ``--select C002`` runs it): on the 36 repositories of the scan corpus it has no true
    hit, and its only hits there (3, in the first version) were false.

Fix:
    Hoist the load out of the loop and reuse the loaded model.
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan.context import CallInfo, FileContext, Hit, LoopFrame, names_in

RULE = Rule(
    "C002",
    "model-load-in-loop",
    Severity.HIGH,
    "Model loaded inside a loop",
    fix="Hoist the load out of the loop.",
    risk="None.",
    commands=("scan",),
    preview=True,
)


def check_model_load(call: CallInfo, ctx: FileContext) -> None:
    """Hold a loop-invariant load inside a loop; judged when the outermost loop ends (does it train?)."""
    kind = call.load_kind or ""
    loops = ctx.loops
    if kind.startswith("build") or not loops or ctx.scope.guards or ctx.scope.once_guards:
        return
    varying: set[str] = set()
    for frame in loops:
        varying |= frame.targets | frame.assigned
    node = call.node
    used = set()
    for part in (*node.args, *(kw.value for kw in node.keywords), node.func):
        used |= names_in(part)
    if used & varying:
        return
    for frame in loops:
        if isinstance(frame.node, ast.While) and (any(
                isinstance(n, (ast.Break, ast.Return)) for stmt in frame.node.body for n in ast.walk(stmt))
                or names_in(frame.node.test) & _assigned_in(frame.node)):
            return
    hit = ctx.make_hit(
        RULE.code,
        node,
        f"model loaded inside a loop ({kind}) with the same arguments each iteration; hoist it out of the loop",
        {"call": kind, "loop_line": getattr(loops[-1].node, "lineno", None)},
    )
    held: list[Hit] = loops[0].data.setdefault(RULE.code, [])
    held.append(hit)


def _assigned_in(loop: ast.While) -> set[str]:
    names: set[str] = set()
    for stmt in loop.body:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
    return names


def loop_end(frame: LoopFrame, ctx: FileContext) -> None:
    """Report held loads of the outermost loop unless the loop trains (a fresh model per fold or run)."""
    held: list[Hit] | None = frame.data.get(RULE.code)
    if held and not frame.trains:
        ctx.hits.extend(held)
