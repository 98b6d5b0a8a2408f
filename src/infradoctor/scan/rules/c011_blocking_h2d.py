"""C011 blocking-h2d: pinned host data is copied to the GPU without ``non_blocking=True``.

What it detects:
    ``x.to(device)`` / ``x.cuda()`` without ``non_blocking=True`` where ``x`` holds pinned memory: it comes from a
    ``DataLoader(..., pin_memory=True)`` bound to a name or an attribute (``for x, y in loader:``, also
    ``self.train_loader`` assigned in ``__init__`` from a helper that returns the loader), from ``.pin_memory()``,
    or from a loop over such a batch (``{k: v.to(device) for k, v in batch.items()}``). Casts
    (``.to(torch.float16)``) and copies to ``"cpu"`` are not reported.

Why it matters:
    Pinning only pays off when the copy is asynchronous: without ``non_blocking=True`` the host waits for each
    copy, so the next batch's preparation cannot overlap with the transfer.

How it is measured:
    Statically, by per-function data flow from the pinned loader or ``.pin_memory()`` to the copy.

    Preview (off by default; ``--select C011`` runs it): it has never fired on the 36 repositories of the scan
    corpus, so nothing measures it yet.

Fix:
    ``x.to(device, non_blocking=True)`` (do not read ``x`` on the host before a synchronising operation).
"""

from __future__ import annotations

import ast

from infradoctor.findings import Rule, Severity
from infradoctor.scan import values as V
from infradoctor.scan.context import CallInfo, FileContext, dotted

RULE = Rule(
    "C011",
    "blocking-h2d",
    Severity.LOW,
    "Copy of pinned data to CUDA without non_blocking",
    fix="Use .to('cuda', non_blocking=True).",
    risk="Do not read the tensor on the host before a sync.",
    commands=("scan",),
    preview=True,
)
CALL_NAMES = frozenset({"to", "cuda"})


def _is_device(node: ast.AST, ctx: FileContext) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value not in ("cpu", "meta")
    if isinstance(node, ast.Call):
        return ctx.resolve_expr(node.func) == "torch.device"
    key = dotted(node)
    if key is None:
        return False
    qual = ctx.resolve(key)
    if qual is not None and qual.startswith("torch."):
        return False  # a dtype such as torch.float16
    last = key.rsplit(".", 1)[-1].lower()
    return ctx.key_kind(key) == V.CUDA or any(word in last for word in ("device", "dev", "gpu", "cuda", "rank"))


def check(call: CallInfo, ctx: FileContext) -> None:
    """Report a blocking copy of pinned data."""
    receiver = call.receiver
    if receiver is None:
        return
    pinned_name = call.receiver_key is not None and ctx.scope.kinds.get(call.receiver_key) == V.PINNED
    pinned = pinned_name or (isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute)
                             and receiver.func.attr == "pin_memory")
    if not pinned:
        return
    kw = call.keyword("non_blocking")
    if kw is not None and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
        return
    if call.name == "to":
        device = call.node.args[0] if call.node.args else (call.keyword("device").value  # type: ignore[union-attr]
                                                           if call.keyword("device") else None)
        if device is None or not _is_device(device, ctx):
            return
    what = f"pinned `{call.receiver_key}`" if pinned_name else "pinned tensor"
    ctx.report(RULE.code, call.node, f"{what} copied with .{call.name}() without "
               "non_blocking=True; the host waits for every copy", {"tensor": call.receiver_key})
