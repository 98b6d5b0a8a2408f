"""P003 grad-in-inference: autograd records a graph that no backward ever uses.

What it detects:
    A line that calls a model with trainable parameters while grad mode is on, and whose calls' autograd graphs
    no backward pass ever used: pure inference, evaluation inside a training run, or serving without
    ``no_grad``/``inference_mode``. Judged per call site, so the evaluation loop of a training script is found
    at its own line even though the training calls of the same model do use their graphs.

Why it matters:
    Recording the autograd graph keeps every intermediate activation alive until the output is freed and adds
    bookkeeping to every op: more memory (and out-of-memory at larger batches) and slower inference.

How it is measured:
    Each top-level model call in grad mode puts a marker on the autograd nodes of its outputs (in the nodes'
    ``metadata``) with a hook that fires when a backward runs through them; when the nodes are freed, or at the
    end of the run, a graph whose hook never fired was not used. (Where an output has no graph to mark, a call
    followed by another call of the model before any backward counts as unused.) Fires for a call site with at
    least ``MIN_UNUSED`` unused calls making at least ``UNUSED_SHARE`` of the site's grad-mode calls. Impact:
    share of run time in those calls.

Fix:
    Wrap the inference code in ``with torch.inference_mode():`` (or ``torch.no_grad()``) around the call site
    named in the finding.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, pct, share, site_location, sites_of, where

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
"""Unused grad-mode calls needed at one call site."""
UNUSED_SHARE = 0.5
"""Share of the site's grad-mode calls that must be unused."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Grad-mode calls whose graph no backward used, per call site."""
    findings = []
    for module in analysis.evidence.modules:
        if not module.trainable:
            continue
        for site in sites_of(module):
            unused = site.unused_grad_calls
            if unused < MIN_UNUSED or not site.grad_calls or unused < UNUSED_SHARE * site.grad_calls:
                continue
            impact = share(site.time_s * unused / max(1, site.calls), analysis.run_time_s)
            loc = site_location(site, options)
            within = f" in {site.function}()" if site.function and site.function != "<module>" else ""
            findings.append(
                RULE.finding(
                    f"{module.cls} ran {unused} of {site.calls} calls{within} with autograd on and no backward "
                    f"using the graph ({pct(impact)} of run time)",
                    {
                        "unused_grad_calls": unused,
                        "grad_calls": site.grad_calls,
                        "calls": site.calls,
                        "model_calls": module.calls,
                        "kept_graphs": site.kept_graphs,
                        "backward_calls": analysis.evidence.backward_calls,
                        "params": module.params,
                    },
                    fix=f"Wrap the inference {where(loc)} in `with torch.inference_mode():` (or torch.no_grad()).",
                    location=loc,
                    impact=impact,
                )
            )
    return findings
