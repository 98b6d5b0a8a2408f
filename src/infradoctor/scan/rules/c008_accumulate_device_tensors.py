"""C008 accumulate-device-tensors: model outputs or losses are kept across iterations with their autograd graph.

What it detects:
    In PyTorch code, inside a loop and with autograd on: ``outputs.append(out)``, ``losses.extend([loss])``,
    ``total_loss += loss`` where the value is a model output or a loss (a name assigned from a model call, a loss
    function such as ``criterion``/``F.cross_entropy``/``*_loss``, or ``out.loss``/``out.logits``) that was not
    passed through ``.detach()``, ``.item()``, ``.cpu()``, ``.tolist()``, ``.numpy()``, ``float()``.
    Gradient accumulation is not reported: a list or total that is later fed to ``.backward()`` in the same
    function. Nor are a model's own methods (``nn.Module`` code such as ``forward_intermediates`` or a DenseNet
    block, whose graph must flow back to the caller), values computed under ``no_grad`` and kept after the block,
    and test code.

Why it matters:
    Each kept tensor holds its whole autograd graph (every activation of that forward): memory grows every
    iteration until the process runs out (P007 at run time). This is the PyTorch FAQ's "don't accumulate history
    across your training loop".

How it is measured:
    Statically, with per-function data flow of one assignment level. Under ``no_grad``/``inference_mode`` there
    is no graph and nothing is reported.

    Preview (off by default; ``--select C008`` runs it): on the 36 repositories of the scan corpus it has no
    true hit; its 10 hits in the first version were all false.

Fix:
    Keep ``loss.item()`` (a float) or ``out.detach().cpu()`` instead of the tensor.
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan import values as V
from infradoctor.scan.context import CallInfo, FileContext, Hit, Scope, dotted

RULE = Rule(
    "C008",
    "accumulate-device-tensors",
    Severity.MEDIUM,
    "Model outputs/losses kept in a list with their graph",
    fix="Append .detach().cpu() or .item() instead.",
    risk="Detached values cannot be backpropagated.",
    commands=("scan",),
    preview=True,
)
CALL_NAMES = frozenset({"append", "extend", "add", "insert"})
NODES = (ast.AugAssign,)


def _graph_value(node: ast.AST, ctx: FileContext) -> str | None:
    """Name of the graph-carrying value ``node`` is, or None."""
    if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) == 1:
        node = node.elts[0]
    kinds = ctx.scope.kinds
    if isinstance(node, ast.Name):
        return node.id if kinds.get(node.id) in V.GRAPH_KINDS else None
    if isinstance(node, ast.Attribute) and node.attr in ("loss", "logits", "last_hidden_state"):
        base = dotted(node.value)
        return dotted(node) if base is not None and kinds.get(base) in V.GRAPH_KINDS else None
    return None


def _hold(ctx: FileContext, node: ast.AST, container: str, value: str) -> None:
    hit = ctx.make_hit(
        RULE.code, node, f"`{value}` is kept in `{container}` with its autograd graph on every iteration; keep "
        "its .item() or .detach().cpu() instead", {"container": container, "value": value},
    )
    pending: list[tuple[str, Hit]] = ctx.scope.data.setdefault(RULE.code, [])
    pending.append((container, hit))


def check(call: CallInfo, ctx: FileContext) -> None:
    """Hold an append of a graph-carrying value made in a loop."""
    scope = ctx.scope
    if not ctx.uses_torch or not ctx.loops or scope.no_grad or not call.node.args or not call.receiver_key or (
            scope.in_module_class):
        return
    value = _graph_value(call.node.args[-1], ctx)
    if value is not None:
        _hold(ctx, call.node, call.receiver_key, value)


def check_node(node: ast.AST, ctx: FileContext) -> None:
    """Hold ``total += loss`` made in a loop."""
    scope = ctx.scope
    if not isinstance(node, ast.AugAssign) or not ctx.uses_torch or not ctx.loops or scope.no_grad or (
            scope.in_module_class):
        return
    target = dotted(node.target)
    value = _graph_value(node.value, ctx)
    if target is None or value is None or scope.kinds.get(target) in V.GRAPH_KINDS:
        return
    _hold(ctx, node, target, value)


def scope_end(scope: Scope, ctx: FileContext) -> None:
    """Report held accumulations unless the container is later back-propagated (gradient accumulation)."""
    pending: list[tuple[str, Hit]] | None = scope.data.get(RULE.code)
    if not pending:
        return
    backward = set(scope.backward_names)
    for name in list(backward):
        backward |= scope.deps.get(name, set())
    for container, hit in pending:
        if container.split(".", 1)[0] not in backward and container not in backward:
            ctx.hits.append(hit)
