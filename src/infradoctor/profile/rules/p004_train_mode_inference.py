"""P004 train-mode-inference: a model with dropout or batch-norm runs inference in ``train()`` mode.

What it detects:
    Calls of a model that contains mode-dependent layers (dropout, batch-norm) with ``module.training`` true and
    no training going on (grad off, or grad on but never used by a backward).

Why it matters:
    In train mode dropout randomly zeroes activations and batch-norm uses the batch's statistics (and updates its
    running averages): predictions are wrong and non-deterministic, and batch-norm state drifts.

How it is measured:
    Each top-level call records ``module.training`` and grad mode; the module's dropout/batch-norm layers are
    listed when it is first seen. Fires at ``MIN_CALLS`` such inference calls. Impact: share of run time in them.

Fix:
    Call ``model.eval()`` before inference (and ``model.train()`` before training resumes).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, module_location, share, where

RULE = Rule(
    "P004",
    "train-mode-inference",
    Severity.MEDIUM,
    "Model is in train() mode during inference",
    fix="Call model.eval() before inference (dropout and batch-norm behave differently in train mode).",
    risk="None for inference; remember model.train() before resuming training.",
    commands=("profile",),
)
MIN_CALLS = 10
"""Inference calls in train mode needed."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Inference in train mode on models whose output depends on the mode."""
    findings = []
    for module in analysis.evidence.modules:
        if not module.mode_layers or not module.calls:
            continue
        inference_calls = module.train_mode_inference_calls + min(module.unused_grad_calls, module.train_mode_calls)
        if inference_calls < MIN_CALLS:
            continue
        loc = module_location(module, options)
        findings.append(
            RULE.finding(
            f"{module.cls} ran {inference_calls} inference calls in train() mode with "
                f"{', '.join(module.mode_layers)} layers",
                {
                    "train_mode_inference_calls": inference_calls,
                    "calls": module.calls,
                    "mode_layers": list(module.mode_layers),
                    "backward_calls": analysis.evidence.backward_calls,
                },
                fix=f"Call model.eval() before the inference loop {where(loc)} (model.train() before training again).",
                location=loc,
                impact=share(module.time_s * inference_calls / module.calls, analysis.run_time_s),
            )
        )
    return findings
