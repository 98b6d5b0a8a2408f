"""C009 dataloader-workers: a DataLoader loads data in the main process.

What it detects:
    ``torch.utils.data.DataLoader(...)`` (through any import alias) without ``num_workers`` over a dataset known to
    do work per item: a torchvision, torchaudio or torchtext dataset, Hugging Face ``load_dataset``, a dataset built
    with ``transform=``, or a ``Dataset`` class of the file whose ``__getitem__`` does more than index a list it
    holds (also through ``Subset``/``ConcatDataset`` and names assigned from these). Not reported: an explicit
    ``num_workers=0`` (a decision, as ``pin_memory=False`` is for C010) or a variable; ``**kwargs`` that may carry
    it; an elided ``DataLoader(...)``; datasets whose cost is not known here (a parameter, another module's class);
    data already in memory (``TensorDataset``, ``torch.tensor([...])``, a list); a serving handler class (a loader
    built once at set-up, such as a calibration set); test code. When the loader's ``collate_fn`` (a function of the
    file) moves tensors to a device, the message says to move that copy out first: CUDA does not work in forked
    workers.

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
PER_ITEM_DATASETS = ("torchvision.datasets.", "torchaudio.datasets.", "torchtext.datasets.", "datasets.load_dataset",
                     "torchvision.datasets", "datasets.load_from_disk")
"""Dataset libraries whose items are decoded, read or transformed one by one."""
WRAPPERS = frozenset({"Subset", "ConcatDataset", "ChainDataset", "StackDataset"})
"""Datasets that wrap others: the wrapped one decides."""
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


def _per_item_work(dataset: ast.expr | None, ctx: FileContext, depth: int = 0) -> bool:
    """The dataset is known to do work per item (decode, read, transform): workers would overlap it."""
    if dataset is None or depth > 2:
        return False
    if isinstance(dataset, ast.Call):
        qual = ctx.resolve_expr(dataset.func) or ""
        name = dotted(dataset.func) or ""
        if qual.startswith(PER_ITEM_DATASETS) or any(kw.arg in ("transform", "transforms", "target_transform")
                                                     for kw in dataset.keywords):
            return True
        if name.rsplit(".", 1)[-1] in WRAPPERS:
            inner = dataset.args[0] if dataset.args else None
            if isinstance(inner, (ast.List, ast.Tuple)) and inner.elts:
                inner = inner.elts[0]
            return _per_item_work(inner, ctx, depth + 1)
        info = ctx.index.classes.get(name)
        if info is not None:
            getitem = info.methods.get("__getitem__")
            return getitem is not None and not _trivial_getitem(getitem.node)
        return False
    if isinstance(dataset, ast.Name):
        fn = ctx.scope.info
        values = (fn.assigns.get(dataset.id) if fn is not None else None) or ctx.index.module_assigns.get(dataset.id)
        return bool(values) and all(v is not None and _per_item_work(v, ctx, depth + 1) for v in values or ())
    return False


def _trivial_getitem(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``__getitem__`` does nothing (``pass``) or returns an entry of a list it holds (``self.data[index]``)."""
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if all(isinstance(s, ast.Pass) for s in body):
        return True
    if len(body) == 1 and isinstance(body[0], ast.Return):
        value = body[0].value
        return isinstance(value, ast.Subscript) and (dotted(value.value) or "").startswith("self.")
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
    if value is not None:
        return  # set, to 0 on purpose or to a variable
    dataset = _dataset(call)
    if _in_memory(dataset, ctx) or not _per_item_work(dataset, ctx):
        return
    where = "DataLoader without num_workers"
    advice = "set num_workers (e.g. 4) and persistent_workers=True"
    evidence: dict[str, object] = {"num_workers": None}
    if _collate_moves_to_device(call, ctx):
        advice = "move the .to(device) out of collate_fn into the loop (CUDA does not work in forked workers), " \
                 "then set num_workers"
        evidence["collate_moves_to_device"] = True
    ctx.report(RULE.code, call.node, f"{where} loads every batch in the main process; {advice}", evidence)
