"""P013 slow-stage: a stage other than compute dominates the step.

What it detects:
    Steady steps where host-to-device copies, host syncs, or other Python (time outside data loading, forward,
    backward, optimizer and the loops already attributed to host reads) take most of the time.

Why it matters:
    The model is not the bottleneck: pre/post-processing, logging, metric computation or copies are. Faster
    hardware or a faster model would not help.

How it is measured:
    Each step's time is split into data wait, H2D copies, forward, backward, optimizer, host syncs, loading and
    other Python (the rest). Fires when H2D or host syncs reach ``STAGE_FRACTION``, or unexplained other Python
    reaches ``OTHER_FRACTION`` of steady step time. Impact: that share. For a server under load
    (``profile --load-url``) a step runs from one model call to the next and so includes the idle time between
    requests: other Python is not judged there, and H2D copies and host syncs are shares of the measured busy
    time (data wait, H2D, forward, backward, optimizer, syncs, loading) instead of the step time.

Fix:
    Profile the named stage (py-spy, cProfile) and move it off the critical path: vectorise it, move it into
    DataLoader workers, or run it every N steps.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, pct

RULE = Rule(
    "P013",
    "slow-stage",
    Severity.MEDIUM,
    "One stage dominates step time",
    fix="Optimise or move the dominant stage off the critical path.",
    risk="Depends on the stage.",
    commands=("profile",),
)
STAGE_FRACTION = 0.30
"""Share of step time for H2D copies or host syncs."""
OTHER_FRACTION = 0.50
"""Share of step time in unexplained other Python."""
_ADVICE = {
    "h2d": "pin the host memory and copy with non_blocking=True, or keep data on the device",
    "sync": "read tensor values less often (once per step or every N steps)",
    "other": "find the Python work between the model calls (pre/post-processing, metrics, logging) with a "
    "sampling profiler and vectorise it, move it into DataLoader workers, or run it every N steps",
}


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Dominant non-compute stage."""
    if len(analysis.steady) < options.min_steps or analysis.steady_time_s <= 0:
        return []
    if options.serving:
        # idle time between requests lands in "other": judge copies and syncs against the busy time only
        busy = sum(v for k, v in analysis.phase_s.items() if k != "other")
        if busy <= 0:
            return []
        shares = {"h2d": analysis.phase_s["h2d"] / busy, "sync": analysis.phase_s["sync"] / busy}
    else:
        steps_share = analysis.steady_time_s / analysis.steps_time_s if analysis.steps_time_s else 1.0
        explained = analysis.sync_span_s * steps_share
        shares = {
            "h2d": analysis.fraction("h2d"),
            "sync": analysis.fraction("sync"),
            "other": max(0.0, analysis.phase_s["other"] - explained) / analysis.steady_time_s,
        }
    stage, value = max(shares.items(), key=lambda kv: kv[1])
    if value < (OTHER_FRACTION if stage == "other" else STAGE_FRACTION):
        return []
    stage_s = analysis.phase_s[stage] if stage != "other" else value * analysis.steady_time_s
    per_step = stage_s * 1000 / len(analysis.steady)
    names = {"h2d": "host-to-device copies", "sync": "host syncs", "other": "Python outside the model"}
    return [
        RULE.finding(
            f"{names[stage].capitalize()} take {pct(value)} of each step ({per_step:.1f} ms)",
            {"stage": stage, "fraction": round(value, 4), "ms_per_step": round(per_step, 3),
             "forward_fraction": round(analysis.fraction("forward"), 4),
             "backward_fraction": round(analysis.fraction("backward"), 4)},
            fix=f"{names[stage].capitalize()} dominate the step: {_ADVICE[stage]}.",
            impact=round(value, 4),
        )
    ]
