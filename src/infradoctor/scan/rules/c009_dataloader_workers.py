"""C009 dataloader-workers: a DataLoader loads data in the main process.

What it detects:
    ``torch.utils.data.DataLoader(...)`` (through any import alias) without ``num_workers``, or with
    ``num_workers=0``, over a dataset that does work per item. Not reported when ``**kwargs`` may carry it, when it
    is a variable, in an elided ``DataLoader(...)``, over data already in memory as tensors
    (``TensorDataset``, ``torch.tensor([...])``, a list or a literal), over a dataset class of the file whose
    ``__getitem__`` does nothing, in a serving handler class (a loader built once at set-up, such as a calibration
    set), and in test code. When the loader's ``collate_fn`` (a function of the file) moves tensors to a device,
    the message says to move that copy out first: CUDA does not work in forked workers.

Why it matters:
    With no workers, loading, decoding and augmenting each batch happens in the training process between steps:
    the GPU waits for data (P001 at run time). TorchFix has this check (TOR401) but off by default.

How it is measured:
    Statically, from the call's keywords and positional arguments (``num_workers`` is the sixth).

Fix:
    ``DataLoader(ds, num_workers=4, persistent_workers=True)``; tune the count to the CPU cores and item cost.
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan.context import CallInfo, FileContext
from infradoctor.scan.syntax import dotted

RULE = Rule(
    "C009",
    "dataloader-workers",
    Severity.LOW,
    "DataLoader without worker processes",
    fix="Set num_workers (e.g. 4) and persistent_workers=True.",
    risk="More workers use more RAM.",
    commands=("scan",),
)
CALL_NAMES = frozenset({"DataLoader"})
_POSITION = 5
IN_MEMORY_DATASETS = frozenset({"torch.utils.data.TensorDataset", "torch.tensor", "torch.as_tensor",
                                "torch.from_numpy", "torch.randn", "torch.rand", "torch.arange", "torch.zeros",
                                "torch.ones", "torch.randint", "torch.utils.data.dataset.TensorDataset"})
"""Datasets that are tensors already in memory: a worker would only add start-up cost."""


def _elided(call: CallInfo) -> bool:
    """``DataLoader(...)``: an elided call in an example, the arguments are not shown."""
    return any(isinstance(a, ast.Constant) and a.value is Ellipsis for a in call.node.args)


def _dataset(call: CallInfo) -> ast.expr | None:
    kw = call.keyword("dataset")
    return kw.value if kw is not None else (call.node.args[0] if call.node.args else None)


def _in_memory(dataset: ast.expr | None, ctx: FileContext, depth: int = 0) -> bool:
    """The dataset is tensors or plain data in memory, or a dataset class of the file that does nothing per item."""
    if dataset is None or depth > 2:
        return False
    if isinstance(dataset, (ast.List, ast.Tuple, ast.Dict, ast.ListComp, ast.Constant)):
        return True
    if isinstance(dataset, ast.Call):
        qual = ctx.resolve_expr(dataset.func)
        if qual in IN_MEMORY_DATASETS:
            return True
        name = dotted(dataset.func)
        info = ctx.index.classes.get(name or "")
        if info is not None:
            getitem = info.methods.get("__getitem__")
            return getitem is not None and all(
                isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
                for s in getitem.node.body)
        return False
    if isinstance(dataset, ast.Name):
        fn = ctx.scope.info
        values = (fn.assigns.get(dataset.id) if fn is not None else None) or ctx.index.module_assigns.get(dataset.id)
        return bool(values) and all(v is not None and _in_memory(v, ctx, depth + 1) for v in values or ())
    return False


def _collate_moves_to_device(call: CallInfo, ctx: FileContext) -> bool:
    kw = call.keyword("collate_fn")
    name = dotted(kw.value) if kw is not None else None
    fn = ctx.index.functions.get(name or "")
    if fn is None:
        return False
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("to", "cuda")
               for n in ast.walk(fn.node))


def check(call: CallInfo, ctx: FileContext) -> None:
    """Report a DataLoader without worker processes over data that costs something per item."""
    if call.qualname not in K.DATALOADERS or call.has_star_kwargs or _elided(call):
        return
    scope = ctx.scope
    if (scope.category is not None and scope.category.handler) or scope.test:
        return
    kw = call.keyword("num_workers")
    value = kw.value if kw is not None else (call.node.args[_POSITION] if len(call.node.args) > _POSITION else None)
    if value is not None and not (isinstance(value, ast.Constant) and value.value == 0):
        return
    if _in_memory(_dataset(call), ctx):
        return
    where = "DataLoader without num_workers" if value is None else "DataLoader(num_workers=0)"
    advice = "set num_workers (e.g. 4) and persistent_workers=True"
    evidence: dict[str, object] = {"num_workers": None if value is None else 0}
    if _collate_moves_to_device(call, ctx):
        advice = "move the .to(device) out of collate_fn into the loop (CUDA does not work in forked workers), " \
                 "then set num_workers"
        evidence["collate_moves_to_device"] = True
    ctx.report(RULE.code, call.node, f"{where} loads every batch in the main process; {advice}", evidence)
