"""P005 host-sync-in-loop: tensor values are read on the host over and over inside the hot loop.

What it detects:
    A user line that calls ``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, ``float()``/``int()``/``bool()``
    on tensors many times per step (typically a Python loop over elements), or, on GPU, host syncs that take a
    noticeable share of step time.

Why it matters:
    On GPU each read waits for all queued kernels (a device sync) and stalls the pipeline; on any device a
    per-element read turns a vectorised operation into a slow Python loop.

How it is measured:
    The Tensor methods are patched; calls from user code (not from torch) are counted per call site
    (``file:line``), with their time and, per step, the span from the site's first to its last call (the loop
    around it). Reads from installed packages count at the user's line that led there. Judged only where a
    device is in use (CUDA initialised, a model on the GPU or copies to it): on a CPU-only run a host read waits
    for nothing. Fires for a site with at least ``CALLS_PER_STEP`` calls per step, or when syncs take
    ``GPU_SYNC_FRACTION`` of step time. Impact: share of run time inside those loops. For a server under load
    (``profile --load-url``) the count is per request (the larger of top-level model calls and requests sent),
    and a site read at most ``SERVING_READS_PER_REQUEST`` times per request never fires: building the response
    from the output (``.tolist()``) is normal there.

Fix:
    Keep the values on the device inside the loop and read them once after it (``(pred == y).sum().item()``),
    or log every N steps.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, location, pct, share, work_units

RULE = Rule(
    "P005",
    "host-sync-in-loop",
    Severity.MEDIUM,
    "Host-device syncs inside the hot loop",
    fix="Keep values on the device inside the loop; call .item()/.cpu()/.tolist() once after it, or log every N steps.",
    risk="Less frequent logging shows progress later.",
    commands=("profile",),
)
CALLS_PER_STEP = 8
"""Host reads per step at one site at which the rule fires."""
GPU_SYNC_FRACTION = 0.10
"""On GPU: share of step time in host syncs at which the rule fires."""
HIGH_IMPACT = 0.30
"""From this share of run time on the finding is high severity."""
SERVING_READS_PER_REQUEST = 2
"""For a server: reads per request at one site that are always fine (one per response, plus one)."""
SYNC_KINDS = ("item", "tolist", "cpu", "numpy", "float", "int", "bool")
"""Methods that read values (``iter`` is P012, printing is not judged)."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Sites reading tensor values many times per step."""
    ev = analysis.evidence
    if not ev.device_in_use:
        return []  # on the CPU a host read is no device sync
    steps, unit = work_units(analysis, options)
    sites = [s for s in ev.syncs if s.kind in SYNC_KINDS]
    if options.serving:
        sites = [s for s in sites if s.calls / steps > SERVING_READS_PER_REQUEST]
    if not sites:
        return []
    gpu_heavy = analysis.fraction("sync") >= GPU_SYNC_FRACTION
    hot = [s for s in sites if s.calls / steps >= CALLS_PER_STEP or (gpu_heavy and s.calls >= steps)]
    if not hot:
        return []
    site = max(hot, key=lambda s: (s.span_s, s.calls))
    loop_s = sum(s.span_s for s in hot)
    impact = share(max(loop_s, sum(s.time_s for s in hot)), analysis.run_time_s)
    per_step = site.calls / steps
    loc = location(site.file, site.line, options, site.function)
    return [
        RULE.finding(
            f".{site.kind}() is called {per_step:.0f} times per {unit} at one line; the loop around it takes "
            f"{pct(impact)} of run time",
            {
                "calls": site.calls,
                f"calls_per_{unit}": round(per_step, 1),
                "kind": site.kind,
                "loop_ms": round(site.span_s * 1000, 2),
                "time_in_calls_ms": round(site.time_s * 1000, 2),
                "sites": len(hot),
                "sync_fraction": round(analysis.fraction("sync"), 4),
            },
            severity=Severity.HIGH if impact >= HIGH_IMPACT else Severity.MEDIUM,
            fix=f"At {loc}: stop calling .{site.kind}() per element; compute the result with tensor operations "
            "(e.g. (pred == y).sum()) and read it once per step with a single .item(), or log every N steps.",
            location=loc,
            impact=impact,
        )
    ]
