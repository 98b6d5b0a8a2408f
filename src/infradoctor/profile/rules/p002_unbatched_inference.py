"""P002 unbatched-inference: the model is called one sample at a time.

What it detects:
    A line that calls a model many times for inference (grad off, or a graph no backward used) with a batch of
    one, where the calls are independent of each other. Calls fed by the previous call (an RNN's state passed
    back, a token context that grows by one: autoregressive decoding of one stream) cannot be batched across
    their own steps and are not reported. A server that answers one sample per request is reported at low: the
    batching there happens across requests (dynamic batching), not in the handler.

Why it matters:
    Each call pays the fixed cost of Python dispatch, operator launch and (on GPU) kernel launches for a single
    sample; batching amortises it and keeps wide hardware busy. Batch-of-1 loops are often 10-100x slower per
    sample than batched calls.

How it is measured:
    Every top-level model call records the size of its first tensor argument's batch dimension (dimension 1 for
    sequence-first RNNs and transformers, else 0; a 1-D input counts as one sample) and whether it was fed by the
    previous call. Fires for a call site of a model with parameters with at least ``MIN_CALLS`` calls, at least
    ``BATCH1_SHARE`` of them with batch 1 and for inference, and fewer than ``SEQUENTIAL_SHARE`` of them
    sequential. High from ``HIGH_IMPACT`` of run time, else medium; low for a server under load.

Fix:
    Stack the samples (``torch.stack`` or a DataLoader ``batch_size``) and call the model once per batch, at the
    call site named in the finding; for a server, batch concurrent requests (a dynamic batcher).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, pct, share, site_location, sites_of, where

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
"""Calls at one site needed before judging."""
BATCH1_SHARE = 0.8
"""Share of the site's calls with batch size 1 (and of its calls that are inference) at which the rule fires."""
SEQUENTIAL_SHARE = 0.3
"""Calls fed by the previous call from this share on make the site one sequential stream."""
HIGH_IMPACT = 0.3
"""Share of run time in the calls from which the finding is high."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Batch-1 inference calls of a model, per call site."""
    findings = []
    for module in analysis.evidence.modules:
        if module.params == 0:
            continue
        for site in sites_of(module):
            if site.calls < MIN_CALLS or site.batch1_calls < BATCH1_SHARE * site.calls:
                continue
            inference, sequential = site.inference_calls, site.sequential_calls
            if inference < BATCH1_SHARE * site.calls or sequential >= SEQUENTIAL_SHARE * site.calls:
                continue
            impact = share(site.time_s, analysis.run_time_s)
            loc = site_location(site, options)
            if options.serving:
                severity = Severity.LOW
                fix = (f"Each request carries one sample {where(loc)}: to serve more per second, batch concurrent "
                       "requests (a dynamic batcher that waits a few ms to fill a batch) instead of one call each.")
            else:
                severity = Severity.HIGH if impact >= HIGH_IMPACT else Severity.MEDIUM
                fix = (f"Collect the samples {where(loc)} into batches (torch.stack(samples) or a DataLoader with "
                       "batch_size=32..256) and call the model once per batch instead of once per sample.")
            findings.append(
                RULE.finding(
                    f"{module.cls} is called {site.calls} times with batch size 1 ({pct(impact)} of run time)",
                    {
                        "calls": site.calls,
                        "batch1_calls": site.batch1_calls,
                        "batch_sizes": dict(site.batch_sizes),
                        "sequential_calls": site.sequential_calls,
                        "time_in_calls_ms": round(site.time_s * 1000, 2),
                        "ms_per_call": round(site.time_s * 1000 / site.calls, 4),
                        "params": module.params,
                    },
                    severity=severity,
                    fix=fix,
                    location=loc,
                    impact=impact,
                )
            )
    return findings
