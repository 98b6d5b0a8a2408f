"""P008 cold-start: the first step is much slower than steady state.

What it detects:
    A first step many times slower than the median steady-state step, long enough to matter.

Why it matters:
    Lazy initialisation, allocator warm-up, cuDNN autotuning or compilation land on the first request or batch:
    in a service that is a slow first response (and a failed readiness probe); in a benchmark, a wrong number.

How it is measured:
    The first step starts at the program's first step-related activity (a batch, a model call), not at start-up,
    so imports and dataset construction are not counted; time spent loading weights in it is left out (P006).
    A first step that did more work than a steady one (more model calls than ``MAX_WORK_RATIO`` times the steady
    median: an evaluation before the first training step) is not comparable and is not judged. Fires when the
    first step takes at least ``MIN_RATIO`` times the steady median and ``NOISE_RATIO`` times the steady p90 (so
    a machine whose steps vary under background load does not make every slow step a cold start), and the excess
    is at least ``MIN_EXCESS_S`` and ``MIN_EXCESS_SHARE`` of the steps' time.

Fix:
    Warm up before serving or measuring: run a few dummy batches at start-up.
"""

from __future__ import annotations

import statistics

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, share
from infradoctor.stats import quantile

RULE = Rule(
    "P008",
    "cold-start",
    Severity.LOW,
    "First steps are much slower than steady state",
    fix="Warm up before measuring or serving: run a few dummy batches at start-up.",
    risk="Warm-up adds start-up time.",
    commands=("profile",),
)
MIN_RATIO = 5.0
"""First step / steady median."""
MIN_EXCESS_S = 0.05
"""Absolute excess of the first step."""
MIN_EXCESS_SHARE = 0.05
"""Excess as a share of all steps' time."""
NOISE_RATIO = 3.0
"""First step / steady p90: the first step must stand out from the run's own slow steps."""
MAX_WORK_RATIO = 2.0
"""Model calls in the first step / steady median calls above which the first step did other work."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Slow first step."""
    if len(analysis.steady) < options.min_steps or not analysis.steps:
        return []
    median_s = statistics.median(analysis.step_ms) / 1000.0
    p90_s = quantile(sorted(analysis.step_ms), 0.9) / 1000.0
    first = analysis.steps[0]
    forwards = statistics.median(s.forwards for s in analysis.steady)
    if first.forwards > MAX_WORK_RATIO * max(1.0, forwards):
        return []  # the first step did more than a step's work (an evaluation before training starts)
    first_s = max(0.0, first.duration_s - first.load_s)
    excess = first_s - median_s
    if median_s <= 0 or first_s < MIN_RATIO * median_s or first_s < NOISE_RATIO * p90_s or excess < MIN_EXCESS_S:
        return []
    impact = share(excess, analysis.run_time_s)
    if impact < MIN_EXCESS_SHARE:
        return []
    return [
        RULE.finding(
            f"The first step takes {first_s * 1000:.0f} ms, {first_s / median_s:.0f}x the steady "
            f"{median_s * 1000:.1f} ms",
            {"first_step_ms": round(first_s * 1000, 2), "steady_median_ms": round(median_s * 1000, 3),
             "steady_p90_ms": round(p90_s * 1000, 3), "ratio": round(first_s / median_s, 1)},
            impact=impact,
        )
    ]
