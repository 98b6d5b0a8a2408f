"""C010 dataloader-pin-memory: a DataLoader feeds CUDA from pageable memory.

What it detects:
    ``torch.utils.data.DataLoader(...)`` without ``pin_memory`` in a file that uses CUDA: ``.cuda()``,
    ``.to("cuda")``, ``.to(device)`` with a device that mentions ``cuda``, any ``torch.cuda.*`` call
    (``is_available()``, ``synchronize()``), ``torch.accelerator``, an ``accelerate.Accelerator``, a Lightning
    ``Fabric`` or ``Trainer`` (they move batches to the accelerator), or an argparse ``--device`` option that
    defaults to ``cuda``. An explicit ``pin_memory=False`` is a decision and is not reported; nor is a call with
    ``**kwargs``, nor test code.

Why it matters:
    Copies from pageable host memory go through a staging buffer and cannot overlap with compute; pinned batches
    copy faster and allow ``non_blocking=True`` transfers (P010 at run time).

How it is measured:
    Statically: DataLoader calls are held until the end of the file and reported if the file shows CUDA use.

Fix:
    ``DataLoader(ds, pin_memory=True, ...)`` and ``.to(device, non_blocking=True)`` for the batches.
"""

from __future__ import annotations

from infradoctor.findings import Rule, Severity
from infradoctor.scan import knowledge as K
from infradoctor.scan.context import CallInfo, FileContext, Hit

RULE = Rule(
    "C010",
    "dataloader-pin-memory",
    Severity.LOW,
    "DataLoader feeding CUDA without pin_memory",
    fix="Set pin_memory=True.",
    risk="Pinned memory is locked host RAM.",
    commands=("scan",),
)
CALL_NAMES = frozenset({"DataLoader"})
_POSITION = 7


def check(call: CallInfo, ctx: FileContext) -> None:
    """Hold a DataLoader without pin_memory until the file's CUDA use is known."""
    if call.qualname not in K.DATALOADERS or call.has_star_kwargs:
        return
    if call.keyword("pin_memory") is not None or len(call.node.args) > _POSITION:
        return
    pending: list[Hit] = ctx.data.setdefault(RULE.code, [])
    pending.append(ctx.make_hit(RULE.code, call.node, "DataLoader feeds CUDA without pin_memory=True; pinned batches "
                                "copy faster and can overlap with compute", {}))


def file_end(ctx: FileContext) -> None:
    """Report held DataLoaders if the file uses CUDA."""
    if ctx.uses_cuda is None:
        return
    for hit in ctx.data.get(RULE.code, []):
        hit.evidence["cuda_use_line"] = ctx.uses_cuda
        ctx.hits.append(hit)
