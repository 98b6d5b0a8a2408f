"""P007 memory-growth: memory grows steadily, step after step.

What it detects:
    Live memory (CUDA allocator on GPU; glibc heap, which holds CPU tensor storage, otherwise) that rises linearly
    over the steady-state steps, and the call site whose outputs are kept alive.

Why it matters:
    Steady growth ends in an out-of-memory crash or swapping; the usual cause is a list that keeps tensors with
    their autograd graph (``losses.append(loss)``, ``outputs.append(model(x))``), which holds every step's
    activations.

How it is measured:
    Per step (at most 10 reads/s) ``/proc/self/statm`` and glibc ``mallinfo2`` (or
    ``torch.cuda.memory_allocated``) are read; a least-squares line is fitted over steady steps. Fires when the
    slope is at least ``MIN_SLOPE_BYTES`` per step, the fitted growth at least ``MIN_GROWTH_BYTES`` and the fit
    ``MIN_R2``. The leak site: outputs of top-level calls are sampled (one per 50 ms) with weak-reference
    finalizers; a call site whose sampled outputs stay alive is the one that keeps them.

Fix:
    Keep ``.detach().cpu()`` copies or ``.item()`` values instead of the tensors themselves, and run inference
    under ``torch.inference_mode()``.
"""

from __future__ import annotations

from infradoctor.findings import Finding, make_finding
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, module_location

CODE = "P007"
MIN_SLOPE_BYTES = 32 * 1024
"""Growth per step at which the rule fires."""
MIN_GROWTH_BYTES = 8 * 1024 * 1024
"""Total fitted growth needed."""
MIN_R2 = 0.8
"""The growth must be steady (fit quality)."""
RETAINED_SHARE = 0.5
"""A call site is the leak site when at least this share of its sampled outputs stayed alive."""
MIN_RETAINED = 3
"""... and at least this many."""


def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Steady memory growth and the site that keeps its outputs."""
    trend = analysis.memory
    if trend is None or len(analysis.steady) < options.min_steps:
        return []
    if trend.slope_bytes_per_step < MIN_SLOPE_BYTES or trend.growth_bytes < MIN_GROWTH_BYTES or trend.r2 < MIN_R2:
        return []
    kept = [
        m for m in analysis.evidence.modules
        if m.retained_alive >= MIN_RETAINED and m.retained_alive >= RETAINED_SHARE * m.retained_sampled
    ]
    leak = max(kept, key=lambda m: (m.params, m.retained_alive), default=None)
    loc = module_location(leak, options) if leak else None
    evidence = {
        "growth_kb_per_step": round(trend.slope_bytes_per_step / 1024, 1),
        "growth_mb": round(trend.growth_bytes / 1e6, 2),
        "r2": round(trend.r2, 3),
        "source": trend.source,
        "readings": trend.readings,
        "steps": len(analysis.steady),
    }
    if leak:
        evidence |= {"kept_outputs_of": leak.cls, "sampled_outputs": leak.retained_sampled,
                     "still_alive": leak.retained_alive}
    site = f"the outputs of {leak.cls} called at {loc} stay alive" if leak else "no single call site was identified"
    return [
        make_finding(
            CODE,
            f"Memory grows {trend.slope_bytes_per_step / 1024:.0f} KB per step "
            f"({trend.growth_bytes / 1e6:.1f} MB over {len(analysis.steady)} steps); {site}",
            evidence,
            fix=(f"The results of the call at {loc} are kept with their graph: store out.detach().cpu() or "
                 ".item() instead, and run inference under torch.inference_mode()." if leak else None),
            location=loc,
            impact=None,
        )
    ]
