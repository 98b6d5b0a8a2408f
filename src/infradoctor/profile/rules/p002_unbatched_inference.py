"""P002 unbatched-inference: the model is called one sample at a time.

What it detects:
    Many inference calls of a model (no backward) whose inputs have a batch size of 1.

Why it matters:
    Each call pays the fixed cost of Python dispatch, operator launch and (on GPU) kernel launches for a single
    sample; batching amortises it and keeps wide hardware busy. Batch-of-1 loops are often 10-100x slower per
    sample than batched calls.

How it is measured:
    Every top-level ``nn.Module`` call records the leading dimension of its first tensor argument (a 1-D input
    counts as one sample). Fires when a module with parameters made at least ``MIN_CALLS`` calls, at least
    ``BATCH1_SHARE`` of them with batch 1, and the run did no backward pass. Impact is the share of run time
    spent in those calls.

Fix:
    Stack the samples (``torch.stack`` or a DataLoader ``batch_size``) and call the model once per batch, at the
    call site named in the finding.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, module_location, pct, share, where

RULE = Rule(
    "P002",
    "unbatched-inference",
    Severity.HIGH,
    "Inference runs one sample at a time",
    fix="Stack samples into batches (torch.stack / DataLoader batch_size) and call the model once per batch.",
    risk="A larger batch raises per-request latency and peak memory.",
    commands=("profile",),
)
MIN_CALLS = 20
"""Calls of one model needed before judging."""
BATCH1_SHARE = 0.8
"""Share of calls with batch size 1 at which the rule fires."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Batch-1 inference calls of a model."""
    ev = analysis.evidence
    if ev.backward_calls:
        return []
    findings = []
    for module in ev.modules:
        if module.params == 0 or module.calls < MIN_CALLS:
            continue
        batch1 = module.batch_sizes.get("1", 0)
        ratio = batch1 / module.calls
        if ratio < BATCH1_SHARE:
            continue
        impact = share(module.time_s, analysis.run_time_s)
        loc = module_location(module, options)
        findings.append(
            RULE.finding(
            f"{module.cls} is called {module.calls} times with batch size 1 ({pct(impact)} of run time)",
                {
                    "calls": module.calls,
                    "batch1_calls": batch1,
                    "batch_sizes": dict(module.batch_sizes),
                    "time_in_calls_ms": round(module.time_s * 1000, 2),
                    "ms_per_call": round(module.time_s * 1000 / module.calls, 4),
                    "params": module.params,
                },
                fix=f"Collect the samples {where(loc)} into batches (torch.stack(samples) or a DataLoader with "
                "batch_size=32..256) and call the model once per batch instead of once per sample.",
                location=loc,
                impact=impact,
            )
        )
    return findings
