"""C009 dataloader-workers: a DataLoader loads data in the main process.

What it detects:
    ``torch.utils.data.DataLoader(...)`` (through any import alias) without ``num_workers``, or with
    ``num_workers=0``. Not reported when ``**kwargs`` may carry it, when it is a variable, or in an elided
    ``DataLoader(...)``.

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
from infradoctor.scan.visitor import CallInfo, FileContext

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


def _elided(call: CallInfo) -> bool:
    """``DataLoader(...)``: an elided call in an example, the arguments are not shown."""
    return any(isinstance(a, ast.Constant) and a.value is Ellipsis for a in call.node.args)


def check(call: CallInfo, ctx: FileContext) -> None:
    """Report a DataLoader without worker processes."""
    if call.qualname not in K.DATALOADERS or call.has_star_kwargs or _elided(call):
        return
    kw = call.keyword("num_workers")
    value = kw.value if kw is not None else (call.node.args[_POSITION] if len(call.node.args) > _POSITION else None)
    if value is None:
        ctx.report(RULE.code, call.node, "DataLoader without num_workers loads every batch in the main process; set "
                   "num_workers (e.g. 4) and persistent_workers=True", {"num_workers": None})
    elif isinstance(value, ast.Constant) and value.value == 0:
        ctx.report(RULE.code, call.node, "DataLoader(num_workers=0) loads every batch in the main process; set "
                   "num_workers (e.g. 4) and persistent_workers=True", {"num_workers": 0})
