"""C007 per-sample-loop: a model is called once per sample in a Python loop.

What it detects:
    In PyTorch code that does not train, a model call (``model(x)``, ``self.model(x)``, ``model.forward(x)``) inside
    a ``for`` loop or a comprehension whose positional arguments come from the loop variable
    (``for x in samples: model(x)``, ``[model(x.unsqueeze(0)) for x in xs]``, ``for i in range(n): model(data[i])``).
    Not reported: loops over loaders or batches (the iterable or the variable is named ``loader``/``batch``/
    ``batches``/``dl``, or each item is unpacked as ``for x, y in data``, or only a field of it is used as
    ``item[0]``), argument tuples (``model(*inputs)``), ensembles (the model itself comes from the loop),
    recurrences (``h = model(x[t], h)``), time-step slicing (``x[:, t]``), loop variables used only in keyword
    options, and functions that train (training loops iterate over batches).

Why it matters:
    A model call has a fixed overhead (Python dispatch, kernel launches, host-device copies) that batching
    amortises; one sample at a time leaves most of a GPU idle and runs many times slower than one batched call.

How it is measured:
    Statically, one report per loop, judged when the function ends: loop targets and names computed from them in
    the loop body are tracked and the model call's positional arguments are checked against them.

Fix:
    Stack the samples into a batch (``torch.stack``/``torch.cat``, a DataLoader with ``batch_size``) and call the
    model once per batch.
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan.visitor import CallInfo, FileContext, Hit, Scope, names_in

RULE = Rule(
    "C007",
    "per-sample-loop",
    Severity.MEDIUM,
    "Model called per sample in a loop",
    fix="Batch the samples and call the model once per batch.",
    risk="Larger batches use more memory.",
    commands=("scan",),
)


def _sample_uses(node: ast.AST, names: set[str]) -> int:
    """Uses of ``names`` in ``node`` that read a sample.

    Not a sample: ``x[:, t]`` (a time step) and ``item[0]`` (a field of a tuple item such as ``(inputs, labels)``).
    """
    excluded: set[int] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript):
            if isinstance(sub.slice, ast.Tuple):
                excluded.update(id(n) for n in ast.walk(sub.slice))
            if isinstance(sub.slice, ast.Constant) and isinstance(sub.slice.value, (int, str)) and isinstance(
                    sub.value, ast.Name):
                excluded.add(id(sub.value))
    return sum(1 for sub in ast.walk(node) if isinstance(sub, ast.Name) and sub.id in names and id(sub) not in excluded)


def check_model_call(call: CallInfo, ctx: FileContext) -> None:
    """Hold a model call fed from the loop variable; judged when the function ends."""
    if not ctx.uses_torch or not ctx.loops:
        return
    frame = ctx.loops[-1]
    if isinstance(frame.node, ast.While) or not frame.targets or frame.unpacked:
        return
    if frame.iter_key and K.LOADER_NAME_RE.search(frame.iter_key.rsplit(".", 1)[-1]):
        return
    if any(K.LOADER_NAME_RE.search(t) for t in frame.targets):
        return
    node = call.node
    args = [a for a in node.args if not isinstance(a, ast.Starred)]
    if not args or len(args) != len(node.args):
        return
    deps = ctx.scope.deps
    derived = set(frame.targets) | {k for k in frame.assigned if deps.get(k, set()) & frame.targets}
    callee = node.func.value if call.name == "forward" and isinstance(node.func, ast.Attribute) else node.func
    if names_in(callee) & derived:
        return
    used: set[str] = set()
    for arg in args:
        used |= names_in(arg)
    if not used & derived or set(call.assigned_to) & used:
        return
    if not any(_sample_uses(arg, derived) for arg in args):
        return
    pending: dict[int, Hit] = ctx.scope.data.setdefault(RULE.code, {})
    if id(frame) in pending:
        return
    pending[id(frame)] = ctx.make_hit(
        RULE.code,
        node,
        f"{call.key or call.receiver_key}(...) is called once per item of the loop at line "
        f"{getattr(frame.node, 'lineno', '?')}; batch the items and call the model once",
        {"model": call.key or call.receiver_key, "iterable": frame.iter_key},
    )


def scope_end(scope: Scope, ctx: FileContext) -> None:
    """Report held per-sample loops of a function that does not train."""
    pending: dict[int, Hit] | None = scope.data.get(RULE.code)
    if pending and not scope.trains:
        ctx.hits.extend(pending.values())
