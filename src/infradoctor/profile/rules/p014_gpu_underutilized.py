"""P014 gpu-underutilized: the GPU is idle much of the run.

What it detects:
    Low GPU utilisation (NVML) while the workload's steps run, or, from CUDA events, GPU busy time far below the
    steps' wall time (idle gaps between kernels).

Why it matters:
    An idle GPU is paid for and wasted; the cause is on the host side (data, Python, launches, syncs).

How it is measured:
    The parent samples ``nvmlDeviceGetUtilizationRates`` (as ``nvidia-smi --query-gpu=utilization.gpu``) every
    0.5 s during steady steps; CUDA events around forward and backward give GPU busy time without syncing the hot
    path. Fires when mean utilisation is below ``UTIL_PERCENT`` over at least ``MIN_SAMPLES`` samples, or busy time
    is below ``BUSY_FRACTION`` of step time. Impact: the idle share.

Fix:
    Feed the GPU faster: larger batches, more DataLoader workers, fewer host syncs, CUDA graphs or
    ``torch.compile`` for launch-bound models.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, pct

RULE = Rule(
    "P014",
    "gpu-underutilized",
    Severity.MEDIUM,
    "GPU is idle much of the time",
    fix="Feed the GPU faster: larger batches, more loader workers, CUDA graphs or torch.compile for launch-bound code.",
    risk="Larger batches raise latency and memory.",
    commands=("profile",),
)
UTIL_PERCENT = 50.0
"""Mean NVML utilisation below which the GPU counts as underused."""
MIN_SAMPLES = 5
"""NVML samples needed."""
BUSY_FRACTION = 0.5
"""CUDA-event busy time over step time below which the GPU counts as idle."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """GPU idle while steps run."""
    ev = analysis.evidence
    if not ev.cuda or len(analysis.steady) < options.min_steps:
        return []
    window = [s for s in ev.system if s.gpu_util_percent and analysis.steady[0].start <= s.t <= analysis.steady[-1].end]
    busy = [s.gpu_busy_s for s in analysis.steady if s.gpu_busy_s is not None]
    busy_fraction = sum(busy) / analysis.steady_time_s if busy and analysis.steady_time_s > 0 else None
    util = analysis.gpu_util_mean
    low_util = util is not None and len(window) >= MIN_SAMPLES and util < UTIL_PERCENT
    low_busy = busy_fraction is not None and busy_fraction < BUSY_FRACTION
    if not (low_util or low_busy):
        return []
    idle = 1.0 - (util / 100.0 if low_util and util is not None else busy_fraction or 0.0)
    return [
        RULE.finding(
            f"The GPU is idle {pct(idle)} of the time while steps run",
            {"gpu_util_mean": round(util, 1) if util is not None else None, "samples": len(window),
             "gpu_busy_fraction": round(busy_fraction, 4) if busy_fraction is not None else None,
             "data_wait_fraction": round(analysis.fraction("data_wait"), 4),
             "sync_fraction": round(analysis.fraction("sync"), 4)},
            impact=round(idle, 4),
        )
    ]
