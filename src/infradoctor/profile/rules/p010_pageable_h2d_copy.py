"""P010 pageable-h2d-copy: host-to-device copies from pageable (not pinned) memory.

What it detects:
    Tensors copied to CUDA (``.to('cuda')``, ``.cuda()``) from ordinary pageable host memory.

Why it matters:
    The driver first copies pageable memory into a pinned staging buffer, and the copy cannot overlap compute:
    ``non_blocking=True`` is silently synchronous. Pinned memory roughly doubles copy bandwidth and lets copies
    overlap kernels.

How it is measured:
    ``Tensor.to``/``Tensor.cuda`` are patched on GPU machines; each CPU-to-CUDA copy records bytes, time,
    ``tensor.is_pinned()``, ``non_blocking`` and the user line of pageable copies. Fires at ``MIN_COPIES``
    copies with at least ``PAGEABLE_SHARE`` of them pageable. Impact: share of step time in copies.

Fix:
    ``DataLoader(pin_memory=True)`` (or ``tensor.pin_memory()``) and ``.to('cuda', non_blocking=True)``.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, location, pct

RULE = Rule(
    "P010",
    "pageable-h2d-copy",
    Severity.MEDIUM,
    "Host-to-device copies from pageable memory",
    fix="Use DataLoader(pin_memory=True) and .to(device, non_blocking=True).",
    risk="Pinned memory is locked host RAM; too much of it starves the OS.",
    commands=("profile",),
)
MIN_COPIES = 10
"""Host-to-device copies needed."""
PAGEABLE_SHARE = 0.5
"""Share of pageable copies at which the rule fires."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Pageable H2D copies."""
    h2d = analysis.evidence.h2d
    copies = int(h2d.get("copies", 0))
    pageable = int(h2d.get("pageable_copies", 0))
    if copies < MIN_COPIES or pageable < PAGEABLE_SHARE * copies:
        return []
    fraction = analysis.fraction("h2d")
    loaders = [d for d in analysis.evidence.dataloaders if not d.pin_memory]
    loader_loc = location(loaders[0].file, loaders[0].line, options) if loaders else None
    sites: dict[str, int] = dict(h2d.get("pageable_sites") or {})
    copy_loc = None
    if sites:
        file, _, line = max(sites.items(), key=lambda kv: kv[1])[0].rpartition(":")
        copy_loc = location(file, int(line) if line.isdigit() else None, options)
    loc = copy_loc or loader_loc
    return [
        RULE.finding(
            f"{pageable} of {copies} host-to-device copies come from pageable memory "
            f"({int(h2d.get('pageable_bytes', 0)) / 1e6:.0f} MB; copies take {pct(fraction)} of step time)",
            {"copies": copies, "pageable_copies": pageable,
             "pageable_mb": round(int(h2d.get("pageable_bytes", 0)) / 1e6, 2),
             "non_blocking_copies": int(h2d.get("non_blocking_copies", 0)), "h2d_fraction": round(fraction, 4),
             "copy_sites": sites},
            fix=(f"Set pin_memory=True in the DataLoader at {loader_loc}" if loader_loc
                 else "Pin the source tensors (tensor.pin_memory())")
            + f" and copy with .to('cuda', non_blocking=True){f' at {copy_loc}' if copy_loc else ''}.",
            location=loc,
            impact=round(fraction, 4),
        )
    ]
