"""C007 per-sample-loop: a model is called once per sample in a Python loop.

What it detects:
    In PyTorch code that does not train, a model call (``model(x)``, ``self.model(x)``, ``model.forward(x)``) inside
    a ``for`` loop or a comprehension whose positional arguments come from the loop variable
    (``for x in samples: model(x)``, ``[model(x.unsqueeze(0)) for x in xs]``, ``for i in range(n): model(data[i])``).
    Not reported: loops over loaders or batches (the iterable or the variable is named ``loader``/``batch``/
    ``batches``/``dl``, the variable is plural, ``for prompts in chunks``, the loop strides through the data,
    ``for i in range(0, n, bptt)``, each item is unpacked as
    ``for x, y in data``, or only a field of it is used as ``item[0]``), argument tuples (``model(*inputs)``),
    ensembles (the model itself comes from the loop), pieces of a batch the code cut up itself
    (``for im in torch.chunk(batch, n)``, ``batch.unbind(0)``: a fixed-batch backend such as an OpenVINO export, or
    bounded memory), recurrences (``h = model(x[t], h)``; autoregressive decoding
    that writes the tokens it feeds back, ``tokens[:, pos] = next_token``), time-step indexing (``x[:, t]``; a
    slice with loop-derived bounds, ``audio[:, f1:f2]``, is a segment and counts), loops over layers
    (``for blk in self.blocks: x = blk(x)``), losses and activations (``self.BCEcls(...)``), an argument built
    from a list that an inner loop fills (already a batch), loop variables used only in keyword options, a model's
    own methods (``nn.Module`` code), functions that train (training loops iterate over batches), and test code.
    What is a model is resolved from assignments: tokenizers, processors, pydantic models and lambdas are not.

Why it matters:
    A model call has a fixed overhead (Python dispatch, kernel launches, host-device copies) that batching
    amortises; one sample at a time leaves most of a GPU idle and runs many times slower than one batched call.

How it is measured:
    Statically, one report per loop, judged when the function ends: loop targets and names computed from them in
    the loop body (through any number of assignments: ``t1 = seg["start"]; f1 = int(t1 * sr); x = audio[f1:]``)
    are tracked and the model call's positional arguments are checked against them.

    Preview (off by default; ``--select C007`` runs it): its one true hit on the scan corpus is a miss found in
    code it was then tuned on; on code it had not seen (the two held-out first passes) it was 0 of 2 right.

Fix:
    Stack the samples into a batch (``torch.stack``/``torch.cat``, a DataLoader with ``batch_size``) and call the
    model once per batch.
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan import values as V
from infradoctor.scan.context import CallInfo, FileContext, Hit, LoopFrame, Scope, names_in

RULE = Rule(
    "C007",
    "per-sample-loop",
    Severity.MEDIUM,
    "Model called per sample in a loop",
    fix="Batch the samples and call the model once per batch.",
    risk="Larger batches use more memory.",
    commands=("scan",),
    preview=True,
)


def _sample_uses(node: ast.AST, names: set[str]) -> int:
    """Uses of ``names`` in ``node`` that read a sample.

    Not a sample: ``x[:, t]`` (a time step) and ``item[0]`` (a field of a tuple item such as ``(inputs, labels)``).
    A slice with loop-derived bounds (``audio[:, f1:f2]``) reads a segment: that counts.
    """
    excluded: set[int] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript):
            if isinstance(sub.slice, ast.Tuple):
                for element in sub.slice.elts:
                    if not isinstance(element, ast.Slice):
                        excluded.update(id(n) for n in ast.walk(element))
            if isinstance(sub.slice, ast.Constant) and isinstance(sub.slice.value, (int, str)) and isinstance(
                    sub.value, ast.Name):
                excluded.add(id(sub.value))
    return sum(1 for sub in ast.walk(node) if isinstance(sub, ast.Name) and sub.id in names and id(sub) not in excluded)


def _derived(frame: LoopFrame, deps: dict[str, set[str]]) -> set[str]:
    """The loop's targets and every name assigned in the loop that is computed from them, transitively."""
    derived = set(frame.targets)
    changed = True
    rounds = 0
    while changed and rounds < 8:  # a chain of assignments is rarely longer; bounded either way
        changed = False
        rounds += 1
        for name in frame.assigned - derived:
            if deps.get(name, set()) & derived:
                derived.add(name)
                changed = True
    return derived


def _strided(frame: LoopFrame) -> bool:
    """``for i in range(0, n, step):`` walks chunks (``get_batch(data, i)``), not items."""
    node = frame.node
    iterable = node.iter if isinstance(node, ast.For) else None
    return (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "range"
            and len(iterable.args) == 3 and not (isinstance(iterable.args[2], ast.Constant)
                                                 and iterable.args[2].value == 1))


def _plural(name: str) -> bool:
    """``for prompts in chunks:``: a plural loop variable holds a batch of items, not one."""
    return len(name) > 3 and name.endswith("s") and not name.endswith(("ss", "us", "is"))


def _layers(frame: LoopFrame, call: CallInfo) -> bool:
    """``for blk in self.blocks: x = blk(x)``: the loop walks layers (the callee is the loop item)."""
    callee = call.node.func
    return isinstance(callee, ast.Name) and callee.id in frame.targets


def _pieces(frame: LoopFrame, ctx: FileContext) -> bool:
    """``for piece in torch.chunk(batch, n):``: the loop walks a batch the code cut up on purpose.

    A backend with a fixed batch size (an OpenVINO export) or bounded memory; batching the pieces undoes the choice.
    """
    iterable = frame.iterable
    if isinstance(iterable, ast.Call):
        func = iterable.func
        if isinstance(func, ast.Attribute) and func.attr in K.BATCH_SPLIT_METHODS:
            return True
        return ctx.resolve_expr(func) in K.BATCH_SPLITTERS
    return frame.iter_key is not None and ctx.key_kind(frame.iter_key) == V.SPLIT


def check_model_call(call: CallInfo, ctx: FileContext) -> None:
    """Hold a model call fed from the loop variable; judged when the function ends."""
    scope = ctx.scope
    if not call.forward or call.model not in (V.MODEL, V.NAMED) or not ctx.uses_torch or not ctx.loops or (
            scope.in_module_class or scope.test):
        return
    frame = ctx.loops[-1]
    if isinstance(frame.node, ast.While) or not frame.targets or frame.unpacked or _layers(frame, call):
        return
    if frame.iter_key and K.LOADER_NAME_RE.search(frame.iter_key.rsplit(".", 1)[-1]):
        return
    if any(K.LOADER_NAME_RE.search(t) or _plural(t) for t in frame.targets) or _strided(frame) or _pieces(frame, ctx):
        return
    node = call.node
    args = [a for a in node.args if not isinstance(a, ast.Starred)]
    if not args or len(args) != len(node.args):
        return
    deps = scope.deps
    derived = _derived(frame, deps)
    callee = node.func.value if call.name == "forward" and isinstance(node.func, ast.Attribute) else node.func
    if names_in(callee) & derived:
        return
    used: set[str] = set()
    for arg in args:
        used |= names_in(arg)
    if not used & derived or set(call.assigned_to) & used:
        return
    if any(name in frame.assigned and name not in derived and name not in deps for name in used):
        return  # a list the loop body fills (`ims.append(...)`, then `model(ims)`): already a batch
    if not any(_sample_uses(arg, derived) for arg in args):
        return
    if RULE.code in frame.data:
        return
    frame.data[RULE.code] = (used, ctx.make_hit(
        RULE.code,
        node,
        f"{call.held_key}(...) is called once per item of the loop at line "
        f"{getattr(frame.node, 'lineno', '?')}; batch the items and call the model once",
        {"model": call.held_key, "iterable": frame.iter_key},
    ))


def loop_end(frame: LoopFrame, ctx: FileContext) -> None:
    """Keep the loop's per-item call unless the loop writes what it feeds the model (decoding: a recurrence)."""
    held: tuple[set[str], Hit] | None = frame.data.get(RULE.code)
    if held is None:
        return
    used, hit = held
    if used & frame.written:
        return  # `tokens[:, pos] = next_token` after `model(tokens[:, :pos])`: one step of a sequence
    pending: list[Hit] = ctx.scope.data.setdefault(RULE.code, [])
    pending.append(hit)


def scope_end(scope: Scope, ctx: FileContext) -> None:
    """Report held per-sample loops of a function that does not train."""
    pending: list[Hit] | None = scope.data.get(RULE.code)
    if pending and not scope.trains:
        ctx.hits.extend(pending)
