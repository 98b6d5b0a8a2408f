"""P001 data-starvation: compute waits for the DataLoader.

What it detects:
    Steps that spend a large share of their time inside the DataLoader's ``__next__`` (waiting for the next
    batch) instead of computing.

Why it matters:
    While the loop waits for data, the CPU cores or the GPU that should run the model sit idle: throughput is
    bounded by data loading, and a faster GPU would not help.

How it is measured:
    ``_BaseDataLoaderIter.__next__`` is timed in the workload; the wait is summed over steady-state steps (warm-up
    steps left out) and divided by their total time. Fires at ``DATA_WAIT_FRACTION`` (medium) and is high from
    ``HIGH_FRACTION``. The evidence adds the DataLoader's configuration and the time per dataset item (dataset
    fetches timed in the main process or in worker processes). torch-tb-profiler flags DataLoader > 5% of a step;
    we only speak up when the wait is a real bottleneck.

Fix:
    Raise ``num_workers`` (the DataLoader line is named), enable ``pin_memory`` and ``persistent_workers``, and
    move heavy per-item work out of ``__getitem__`` (precompute or cache it).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import RuleOptions, location, pct

RULE = Rule(
    "P001",
    "data-starvation",
    Severity.HIGH,
    "Compute waits for data",
    fix=(
        "Raise DataLoader num_workers (try 4, then 8), enable pin_memory and persistent_workers, move heavy per-item "
        "work out of __getitem__ or cache it."
    ),
    risk="More workers use more host RAM and CPU; persistent workers keep that memory between epochs.",
    commands=("profile",),
)
DATA_WAIT_FRACTION = 0.30
"""Share of steady step time waiting for data at which the rule fires."""
HIGH_FRACTION = 0.50
"""From this share on the finding is high severity."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Data wait share of steady steps."""
    ev = analysis.evidence
    if len(analysis.steady) < options.min_steps or not ev.dataloaders:
        return []
    fraction = analysis.fraction("data_wait")
    if fraction < DATA_WAIT_FRACTION:
        return []
    loader = max(ev.dataloaders, key=lambda d: d.wait_s)
    fetch = ev.worker_fetch if ev.worker_fetch.get("items") else ev.fetch
    item_ms = 1000.0 * float(fetch.get("time_s", 0.0)) / fetch["items"] if fetch.get("items") else None
    workers = loader.num_workers or 0
    suggest = max(2, min(8, analysis.cores or 4)) if workers == 0 else min(32, max(workers * 2, 4))
    loc = location(loader.file, loader.line, options)
    wait_ms = 1000.0 * analysis.phase_s["data_wait"] / len(analysis.steady)
    fix = (
        f"In the DataLoader {f'built at {loc}' if loc else ''}: set num_workers={suggest} (now {workers}), "
        "pin_memory=True and persistent_workers=True"
    )
    if item_ms is not None and loader.batch_size:
        fix += (
            f"; each item takes {item_ms:.2f} ms in {loader.dataset}.__getitem__ "
            f"({item_ms * loader.batch_size:.1f} ms per batch of {loader.batch_size}): precompute or cache that work"
        )
    fix += "."
    evidence = {
        "data_wait_fraction": round(fraction, 4),
        "data_wait_ms_per_step": round(wait_ms, 3),
        "step_time_ms_p50": round(sorted(analysis.step_ms)[len(analysis.step_ms) // 2], 3),
        "steps": len(analysis.steady),
        "num_workers": workers,
        "pin_memory": loader.pin_memory,
        "persistent_workers": loader.persistent_workers,
        "batch_size": loader.batch_size,
        "item_time_ms": round(item_ms, 4) if item_ms is not None else None,
        "dataset": loader.dataset,
    }
    return [
        RULE.finding(
            f"The loop waits for data {pct(fraction)} of each step ({wait_ms:.1f} ms of "
            f"{analysis.steady_time_s * 1000 / len(analysis.steady):.1f} ms)",
            evidence,
            severity=Severity.HIGH if fraction >= HIGH_FRACTION else Severity.MEDIUM,
            fix=fix,
            location=loc,
            impact=round(fraction, 4),
        )
    ]
