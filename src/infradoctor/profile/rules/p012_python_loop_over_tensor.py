"""P012 python-loop-over-tensor: Python iterates over a tensor's elements.

What it detects:
    ``for x in tensor`` (``Tensor.__iter__``) from user code over many elements per step.

Why it matters:
    Each element becomes a separate 0-d tensor with its own dispatch: thousands of times slower than one
    vectorised operation, and on GPU every element read is a device sync.

How it is measured:
    ``Tensor.__iter__`` is patched; calls from user code are counted per call site with the number of elements
    iterated. Fires at ``ELEMENTS_PER_STEP`` elements per step at one site.

Fix:
    Replace the loop with tensor operations (``sum``, ``argmax``, masks, ``torch.where``), or convert once with
    ``.tolist()`` when Python values are really needed.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, location

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
"""Elements iterated per step at one site at which the rule fires."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Element-wise iteration over tensors."""
    steps = max(1, len(analysis.evidence.steps))
    hot = [s for s in analysis.evidence.syncs if s.kind == "iter" and s.elements / steps >= ELEMENTS_PER_STEP]
    if not hot:
        return []
    site = max(hot, key=lambda s: s.elements)
    loc = location(site.file, site.line, options, site.function)
    return [
        RULE.finding(
            f"A Python loop iterates over {site.elements / steps:.0f} tensor elements per step",
            {"elements": site.elements, "elements_per_step": round(site.elements / steps, 1), "loops": site.calls},
            fix=f"At {loc}: replace the element loop with a vectorised tensor operation "
            "(or call .tolist() once if Python values are needed).",
            location=loc,
        )
    ]
