"""P009 reduced-precision-available: fp32 matmuls on a GPU that has bf16/TF32 tensor cores.

What it detects:
    A model with float32 parameters running on a CUDA device that supports bf16 (compute capability 8.0+),
    with neither autocast nor TF32 matmuls enabled.

Why it matters:
    On Ampere and newer GPUs, fp32 matmuls run on the slow path; bf16 autocast or TF32 typically gives 2-8x on
    matmul-heavy models for little accuracy cost.

How it is measured:
    The model's parameter dtype and device are read when it is first called; each top-level call records whether
    autocast is on; the workload reports ``torch.get_float32_matmul_precision()``,
    ``torch.backends.cuda.matmul.allow_tf32`` and ``torch.cuda.is_bf16_supported()``. Fires when fewer than
    ``AUTOCAST_SHARE`` of the model's calls ran under autocast. Impact: the share of step time in forward and
    backward (the time that would shrink).

Fix:
    ``with torch.autocast("cuda", dtype=torch.bfloat16):`` around forward (and loss), or
    ``torch.set_float32_matmul_precision("high")``.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, module_location, where

RULE = Rule(
    "P009",
    "reduced-precision-available",
    Severity.MEDIUM,
    "fp32 matmuls where bf16/TF32 would do",
    fix="Use torch.autocast(device_type, dtype=torch.bfloat16) or torch.backends.cuda.matmul.allow_tf32 = True.",
    risk="Autocast and TF32 can change numerical results; validate accuracy.",
    commands=("profile",),
)
AUTOCAST_SHARE = 0.5
"""Fires when fewer calls than this share ran under autocast."""
MIN_CALLS = 10
"""Model calls needed."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """fp32 compute where bf16/TF32 is available."""
    ev = analysis.evidence
    main = analysis.main
    precision = ev.precision
    if not ev.cuda or main is None or main.device != "cuda" or main.dtype != "float32" or main.calls < MIN_CALLS:
        return []
    if not precision.get("bf16_supported") or precision.get("allow_tf32"):
        return []
    if precision.get("float32_matmul_precision", "highest") != "highest":
        return []
    if main.autocast_calls >= AUTOCAST_SHARE * main.calls:
        return []
    if any(dtype in ("bfloat16", "float16") for dtype in main.input_dtypes):
        return []
    compute = round(analysis.fraction("forward") + analysis.fraction("backward"), 4)
    loc = module_location(main, options)
    return [
        RULE.finding(
            f"{main.cls} runs fp32 matmuls on {precision.get('device_name', 'a GPU')} that supports bf16/TF32 "
            f"(forward+backward {100 * compute:.0f}% of step time)",
            {"dtype": main.dtype, "autocast_calls": main.autocast_calls, "calls": main.calls,
             "capability": precision.get("capability"), "allow_tf32": precision.get("allow_tf32"),
             "float32_matmul_precision": precision.get("float32_matmul_precision")},
            fix=f"Wrap the forward and loss {where(loc)} in `with torch.autocast('cuda', dtype=torch.bfloat16):`, "
            "or call torch.set_float32_matmul_precision('high') at start-up.",
            location=loc,
            impact=compute,
        )
    ]
