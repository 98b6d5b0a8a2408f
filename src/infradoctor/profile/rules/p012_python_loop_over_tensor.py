"""P012 python-loop-over-tensor: Python iterates over a tensor's elements.

What it detects:
    ``for x in tensor`` (``Tensor.__iter__``) from user code over many elements per step; and, where no device is
    in use, a line that reads single values (``.item()``, ``float()``, ``int()``, ``bool()``) many times per step
    inside a loop that takes a noticeable share of the run: element by element in Python. (With a GPU in use the
    same reads are device syncs: P005.)

Why it matters:
    Each element becomes a separate 0-d tensor with its own dispatch: thousands of times slower than one
    vectorised operation, and on GPU every element read is a device sync.

How it is measured:
    ``Tensor.__iter__`` is patched; calls from user code are counted per call site with the number of elements
    iterated. Fires at ``ELEMENTS_PER_STEP`` elements per step at one site. Value reads are counted per call site
    with, per step, the span from the site's first to its last read (the loop around it): on a CPU-only run a site
    with ``ELEMENTS_PER_STEP`` reads per step whose loops take ``LOOP_SHARE`` of run time fires too.

Fix:
    Replace the loop with tensor operations (``sum``, ``argmax``, masks, ``torch.where``), or convert once with
    ``.tolist()`` when Python values are really needed.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, location, pct, share

RULE = Rule(
    "P012",
    "python-loop-over-tensor",
    Severity.MEDIUM,
    "Python loop over tensor elements",
    fix="Replace the element loop with a vectorised tensor operation.",
    risk="Vectorised code may use more temporary memory.",
    commands=("profile",),
)
ELEMENTS_PER_STEP = 64
"""Elements iterated (or values read) per step at one site at which the rule fires."""
LOOP_SHARE = 0.10
"""Share of run time the loops around per-value reads must take (CPU-only runs)."""
VALUE_READS = ("item", "float", "int", "bool")
"""Reads of one value each."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Element-wise iteration over tensors."""
    ev = analysis.evidence
    steps = max(1, len(ev.steps))
    hot = [s for s in ev.syncs if s.kind == "iter" and s.elements / steps >= ELEMENTS_PER_STEP]
    if hot:
        site = max(hot, key=lambda s: s.elements)
        loc = location(site.file, site.line, options, site.function)
        return [
            RULE.finding(
                f"A Python loop iterates over {site.elements / steps:.0f} tensor elements per step",
                {"elements": site.elements, "elements_per_step": round(site.elements / steps, 1),
                 "loops": site.calls},
                fix=f"At {loc}: replace the element loop with a vectorised tensor operation "
                "(or call .tolist() once if Python values are needed).",
                location=loc,
            )
        ]
    if ev.device_in_use or options.serving:
        return []  # with a device the reads are syncs (P005); a server reads per request
    reads = [s for s in ev.syncs if s.kind in VALUE_READS and s.calls / steps >= ELEMENTS_PER_STEP]
    looping = [s for s in reads if share(s.span_s, analysis.run_time_s) >= LOOP_SHARE]
    if not looping:
        return []
    site = max(looping, key=lambda s: s.span_s)
    impact = share(site.span_s, analysis.run_time_s)
    loc = location(site.file, site.line, options, site.function)
    return [
        RULE.finding(
            f"A Python loop reads {site.calls / steps:.0f} tensor values one by one per step with .{site.kind}() "
            f"({pct(impact)} of run time in those loops)",
            {"reads": site.calls, "reads_per_step": round(site.calls / steps, 1), "kind": site.kind,
             "loop_ms": round(site.span_s * 1000, 2), "loop_share": impact},
            fix=f"At {loc}: compute the result with tensor operations (e.g. (pred == y).sum().item()) and read it "
            "once, or convert once with .tolist() if Python values are needed.",
            location=loc,
            impact=impact,
        )
    ]
