"""P011 dataloader-config: the DataLoader's settings leave throughput on the table.

What it detects:
    A DataLoader with ``num_workers=0`` while the loop measurably waits for data (below P001's share: from
    there P001 reports it with the same change); worker processes restarted
    every epoch (``persistent_workers=False``) with a visible start-up wait on each epoch's first batch; on GPU,
    ``pin_memory=False``.

Why it matters:
    Without workers, loading and the model take turns on one core; restarting workers every epoch re-imports
    and re-forks (seconds with spawn); unpinned batches copy slowly to the GPU.

How it is measured:
    The DataLoader's constructor is patched to read its configuration and call site; ``__next__`` waits are
    timed, the first batch of each iterator separately. Fires for ``num_workers=0`` at ``DATA_WAIT_FRACTION`` of
    step time waiting, for worker restarts when each epoch's first batch waits ``RESTART_RATIO`` times the median
    wait and at least ``MIN_RESTART_S``. Impact: the data wait share (or the restart waits' share).

Fix:
    ``num_workers`` > 0, ``persistent_workers=True``, ``pin_memory=True`` on GPU, ``prefetch_factor`` suited to
    the item time.
"""

from __future__ import annotations

import statistics

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, location, pct, share, suggested_workers
from infradoctor.profile.rules.p001_data_starvation import DATA_WAIT_FRACTION as P001_FRACTION

RULE = Rule(
    "P011",
    "dataloader-config",
    Severity.LOW,
    "DataLoader configuration leaves throughput on the table",
    fix="Set num_workers > 0, persistent_workers=True and a prefetch_factor suited to item time.",
    risk="More workers use more host RAM and CPU.",
    commands=("profile",),
)
DATA_WAIT_FRACTION = 0.10
"""Data wait share at which ``num_workers=0`` is flagged."""
RESTART_RATIO = 5.0
"""First-batch wait of an epoch over the median batch wait that shows worker start-up."""
MIN_RESTART_S = 0.1
"""... and at least this long."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """DataLoader settings against measured waits."""
    ev = analysis.evidence
    if not ev.dataloaders or len(analysis.steady) < options.min_steps:
        return []
    loader = max(ev.dataloaders, key=lambda d: d.wait_s)
    loc = location(loader.file, loader.line, options)
    problems: list[str] = []
    changes: list[str] = []
    impact = 0.0
    wait_fraction = analysis.fraction("data_wait")
    workers = loader.num_workers or 0
    if workers == 0 and DATA_WAIT_FRACTION <= wait_fraction < P001_FRACTION:  # from P001's share on, P001 says it
        problems.append(f"num_workers=0 while the loop waits for data {pct(wait_fraction)} of step time")
        changes.append(f"num_workers={suggested_workers(analysis.cores)}")
        impact = wait_fraction
    if workers > 0 and not loader.persistent_workers and loader.iterators >= 2 and loader.batches:
        median_wait = loader.wait_s / loader.batches
        restarts = [w for w in loader.first_batch_waits[1:] if w >= max(RESTART_RATIO * median_wait, MIN_RESTART_S)]
        if restarts:
            mean_ms = statistics.fmean(restarts) * 1000
            problems.append(f"workers restart every epoch: first batch waits {mean_ms:.0f} ms")
            changes.append("persistent_workers=True")
            impact = max(impact, share(sum(restarts), analysis.run_time_s))
    if ev.device_in_use and not loader.pin_memory and ev.h2d.get("copies"):
        problems.append("pin_memory=False while batches are copied to the GPU")
        changes.append("pin_memory=True")
    if not problems:
        return []
    return [
        RULE.finding(
            "DataLoader: " + "; ".join(problems),
            {"num_workers": workers, "pin_memory": loader.pin_memory,
             "persistent_workers": loader.persistent_workers, "prefetch_factor": loader.prefetch_factor,
             "batch_size": loader.batch_size, "iterators": loader.iterators,
             "data_wait_fraction": round(wait_fraction, 4)},
            fix=f"DataLoader at {loc}: set {', '.join(changes)}." if loc else f"DataLoader: set {', '.join(changes)}.",
            location=loc,
            impact=round(impact, 4),
        )
    ]
