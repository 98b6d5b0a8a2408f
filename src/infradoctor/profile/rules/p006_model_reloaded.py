"""P006 model-reloaded: the model is built or its weights are loaded again and again.

What it detects:
    ``torch.load``, ``Module.load_state_dict`` or ``*.from_pretrained`` called repeatedly at the same line, or a
    model (a module with parameters) constructed repeatedly at the same line: model loading inside the batch loop
    or the request handler.

Why it matters:
    Loading reads and deserialises the weights and (on GPU) copies them to the device every time: seconds per
    request or per batch, and memory churn. It should happen once at start-up.

How it is measured:
    The load functions are patched (``from_pretrained`` lazily, when transformers is imported); each call is
    counted with its time at the user call site. ``nn.Module.__init__`` records the user line that builds each
    top-level module. Fires at ``MIN_REPEATS`` loads at one site, or ``MIN_REPEATS`` constructions of a model with
    at least ``MIN_PARAMS`` parameters. Impact: share of run time spent loading and building (construction time is
    approximate: from the first to the last submodule built).

Fix:
    Load the model once at start-up (module level, a ``startup`` hook or a cached factory) and reuse it.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, location, pct, share

RULE = Rule(
    "P006",
    "model-reloaded",
    Severity.HIGH,
    "Model is built or loaded repeatedly",
    fix="Load the model once at start-up (module level or a startup hook) and reuse it.",
    risk="Start-up takes longer and the process holds the model's memory for its lifetime.",
    commands=("profile",),
)
MIN_REPEATS = 3
"""Loads (or constructions) at one site needed."""
MIN_PARAMS = 1000
"""Constructions count only for modules with at least this many parameters (a model, not a loss)."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Repeated loads or model constructions at one site."""
    ev = analysis.evidence
    loads = [load for load in ev.loads if load.calls >= MIN_REPEATS]
    builds = [c for c in ev.constructions if c.count >= MIN_REPEATS and (c.params or 0) >= MIN_PARAMS]
    if not loads and not builds:
        return []
    load_time = sum(load.time_s for load in loads) + sum(c.time_s for c in builds)
    impact = share(load_time, analysis.run_time_s)
    if loads:
        top = max(loads, key=lambda load: (load.time_s, load.calls))
        loc = location(top.file, top.line, options)
        title = f"{top.kind} runs {top.calls} times at one line ({pct(impact)} of run time building and loading)"
    else:
        build = max(builds, key=lambda c: c.count)
        loc = location(build.file, build.line, options)
        title = f"{build.cls} ({build.params} parameters) is built {build.count} times at one line"
    evidence = {
        "loads": [{"kind": load.kind, "site": f"{location(load.file, load.line, options)}", "calls": load.calls,
                   "time_ms": round(load.time_s * 1000, 2)} for load in loads],
        "constructions": [{"class": c.cls, "site": f"{location(c.file, c.line, options)}", "count": c.count,
                           "params": c.params, "time_ms": round(c.time_s * 1000, 2)} for c in builds],
        "load_time_ms": round(load_time * 1000, 2),
        "steps": len(analysis.steps),
    }
    return [
        RULE.finding(
            title,
            evidence,
            fix=f"Move the model construction and weight loading at {loc} out of the loop/handler: load once at "
            "start-up and reuse the model object.",
            location=loc,
            impact=impact,
        )
    ]
