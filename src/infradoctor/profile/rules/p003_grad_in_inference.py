"""P003 grad-in-inference: autograd records a graph that no backward ever uses.

What it detects:
    Calls of a model with trainable parameters while grad mode is on, where no backward pass followed before
    the model's next call (pure inference, evaluation, or serving without ``no_grad``/``inference_mode``).

Why it matters:
    Recording the autograd graph keeps every intermediate activation alive until the output is freed and adds
    bookkeeping to every op: more memory (and out-of-memory at larger batches) and slower inference.

How it is measured:
    Each top-level call records ``torch.is_grad_enabled()`` and inference mode; a patched
    ``torch.autograd.backward``/``grad`` marks pending calls as used. A call still pending when the same module is
    called again counts as unused. Fires at ``MIN_UNUSED`` unused calls making at least ``UNUSED_SHARE`` of the
    module's grad-mode calls. Impact: share of run time in those calls.

Fix:
    Wrap the inference code in ``with torch.inference_mode():`` (or ``torch.no_grad()``) around the call site
    named in the finding.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, module_location, pct, share, where

RULE = Rule(
    "P003",
    "grad-in-inference",
    Severity.MEDIUM,
    "Autograd is on during inference",
    fix="Wrap inference in torch.inference_mode() (or torch.no_grad()).",
    risk="Tensors made under inference_mode cannot be used later in autograd.",
    commands=("profile",),
)
MIN_UNUSED = 10
"""Unused grad-mode calls needed."""
UNUSED_SHARE = 0.5
"""Share of grad-mode calls that must be unused."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Grad-mode calls without backward."""
    findings = []
    for module in analysis.evidence.modules:
        if not module.trainable or module.unused_grad_calls < MIN_UNUSED or not module.grad_calls:
            continue
        ratio = module.unused_grad_calls / module.grad_calls
        if ratio < UNUSED_SHARE:
            continue
        impact = share(module.time_s * module.unused_grad_calls / max(1, module.calls), analysis.run_time_s)
        loc = module_location(module, options)
        findings.append(
            RULE.finding(
            f"{module.cls} ran {module.unused_grad_calls} of {module.calls} calls with autograd on and no "
                f"backward ({pct(impact)} of run time)",
                {
                    "unused_grad_calls": module.unused_grad_calls,
                    "grad_calls": module.grad_calls,
                    "calls": module.calls,
                    "backward_calls": analysis.evidence.backward_calls,
                    "params": module.params,
                },
                fix=f"Wrap the inference {where(loc)} in `with torch.inference_mode():` (or torch.no_grad()).",
                location=loc,
                impact=impact,
            )
        )
    return findings
