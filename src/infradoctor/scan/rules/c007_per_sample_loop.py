"""C007 per-sample-loop: a model is called once per sample in a Python loop.

What it detects:
    In PyTorch code, a model call (``model(x)``, ``self.model(x)``, ``model.forward(x)``) inside a ``for`` loop or a
    comprehension whose arguments come from the loop variable (``for x in samples: model(x)``,
    ``[model(x.unsqueeze(0)) for x in xs]``, ``for i in range(n): model(data[i])``). Not reported: loops over
    loaders or batches (the iterable or the variable is named ``loader``/``batch``/``batches``/``dl``), ensembles
    (the model itself comes from the loop), recurrences (``h = model(x[t], h)``) and time-step slicing
    (``x[:, t]``).

Why it matters:
    A model call has a fixed overhead (Python dispatch, kernel launches, host-device copies) that batching
    amortises; one sample at a time leaves most of a GPU idle and runs many times slower than one batched call.

How it is measured:
    Statically, one report per loop: loop targets and names computed from them in the loop body are tracked;
    the model call's arguments are checked against them.

Fix:
    Stack the samples into a batch (``torch.stack``/``torch.cat``, a DataLoader with ``batch_size``) and call the
    model once per batch.
"""

from __future__ import annotations

import ast

from infradoctor.scan import knowledge as K
from infradoctor.scan.visitor import CallInfo, FileContext, names_in

CODE = "C007"


def _only_in_multi_index(node: ast.AST, names: set[str]) -> bool:
    """Every use of ``names`` is inside a multi-dimensional subscript (``x[:, t]``: a time step, not a sample)."""
    uses = 0
    inside = 0
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in names:
            uses += 1
        if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Tuple):
            inside += sum(1 for n in ast.walk(sub.slice) if isinstance(n, ast.Name) and n.id in names)
    return uses > 0 and uses == inside


def check_model_call(call: CallInfo, ctx: FileContext) -> None:
    """Report a model call fed from the loop variable."""
    if not ctx.uses_torch or not ctx.loops:
        return
    frame = ctx.loops[-1]
    if isinstance(frame.node, ast.While) or not frame.targets:
        return
    done: set[int] = ctx.data.setdefault(CODE, set())
    if id(frame) in done:
        return
    if frame.iter_key and K.LOADER_NAME_RE.search(frame.iter_key.rsplit(".", 1)[-1]):
        return
    if any(K.LOADER_NAME_RE.search(t) for t in frame.targets):
        return
    deps = ctx.scope.deps
    derived = set(frame.targets) | {k for k in frame.assigned if deps.get(k, set()) & frame.targets}
    node = call.node
    callee = node.func.value if call.name == "forward" and isinstance(node.func, ast.Attribute) else node.func
    if names_in(callee) & derived:
        return
    args = [*node.args, *(kw.value for kw in node.keywords)]
    used: set[str] = set()
    for arg in args:
        used |= names_in(arg)
    if not used & derived:
        return
    if set(call.assigned_to) & used:
        return
    if all(_only_in_multi_index(arg, derived) for arg in args if names_in(arg) & derived):
        return
    done.add(id(frame))
    ctx.report(
        CODE,
        node,
        f"{call.key or call.receiver_key}(...) is called once per item of the loop at line "
        f"{getattr(frame.node, 'lineno', '?')}; batch the items and call the model once",
        {"model": call.key or call.receiver_key, "iterable": frame.iter_key},
    )
