"""P015 small-batch: the model runs on small batches.

What it detects:
    A model called many times with a median batch size between 2 and ``MAX_SMALL_BATCH`` (batch 1 inference is
    P002).

Why it matters:
    Small batches leave vector units and GPUs underused: per-call overhead dominates, throughput per sample is
    low.

How it is measured:
    Batch size of each top-level call of the model (leading dimension of the first tensor argument). Fires at
    ``MIN_CALLS`` calls with median batch size at most ``MAX_SMALL_BATCH``.

Fix:
    Raise the batch size while latency and memory allow (retune the learning rate when training).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, module_location

RULE = Rule(
    "P015",
    "small-batch",
    Severity.LOW,
    "Batch size is small for this model",
    fix="Raise the batch size while latency and memory allow.",
    risk="A larger batch raises per-request latency and peak memory; training may need a new learning rate.",
    commands=("profile",),
)
MAX_SMALL_BATCH = 8
"""Median batch size at or below which batches count as small."""
MIN_CALLS = 20
"""Model calls needed."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Small median batch of the model."""
    main = analysis.main
    if main is None or main.calls < MIN_CALLS:
        return []
    batch = main.median_batch()
    if not 2 <= batch <= MAX_SMALL_BATCH:
        return []
    return [
        RULE.finding(
            f"{main.cls} runs on batches of {batch}",
            {"median_batch": batch, "calls": main.calls, "batch_sizes": dict(main.batch_sizes)},
            location=module_location(main, options),
        )
    ]
