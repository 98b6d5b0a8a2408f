"""P004 train-mode-inference: a model with dropout or batch-norm runs inference in ``train()`` mode.

What it detects:
    A line that calls a model containing mode-dependent layers (dropout, batch-norm) with ``module.training``
    true while not training: grad off, or grad on with a graph no backward used. Judged per call site: the
    training calls of the same model (train mode, graph used by a backward) are what train mode is for.

Why it matters:
    In train mode dropout randomly zeroes activations and batch-norm uses the batch's statistics (and updates its
    running averages): predictions are wrong and non-deterministic, and batch-norm state drifts.

How it is measured:
    Each top-level call records ``module.training``, grad mode and (see P003) whether a backward used its graph;
    the model's dropout/batch-norm layers are listed when it is first seen. Fires for a call site with at least
    ``MIN_CALLS`` such calls making at least ``SHARE`` of its calls. Impact: share of run time in them.

Fix:
    Call ``model.eval()`` before inference (and ``model.train()`` before training resumes).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, share, site_location, sites_of, where

RULE = Rule(
    "P004",
    "train-mode-inference",
    Severity.MEDIUM,
    "Model is in train() mode during inference",
    fix="Call model.eval() before inference (dropout and batch-norm behave differently in train mode).",
    risk="None for inference; remember model.train() before resuming training.",
    commands=("profile",),
)
MIN_CALLS = 5
"""Inference calls in train mode needed at one call site."""
SHARE = 0.5
"""Share of the site's calls that must be such calls."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Inference in train mode on models whose output depends on the mode, per call site."""
    findings = []
    for module in analysis.evidence.modules:
        if not module.mode_layers or not module.calls:
            continue
        for site in sites_of(module):
            inference = site.train_mode_inference_calls
            if inference < MIN_CALLS or inference < SHARE * site.calls:
                continue
            loc = site_location(site, options)
            findings.append(
                RULE.finding(
                    f"{module.cls} ran {inference} inference calls in train() mode with "
                    f"{', '.join(module.mode_layers)} layers",
                    {
                        "train_mode_inference_calls": inference,
                        "calls": site.calls,
                        "model_calls": module.calls,
                        "mode_layers": list(module.mode_layers),
                        "backward_calls": analysis.evidence.backward_calls,
                    },
                    fix=f"Call model.eval() before the inference loop {where(loc)} (model.train() before training "
                    "again).",
                    location=loc,
                    impact=share(site.time_s * inference / max(1, site.calls), analysis.run_time_s),
                )
            )
    return findings
