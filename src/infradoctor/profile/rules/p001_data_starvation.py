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
    ``HIGH_FRACTION``. The share must hold across the run's own repeated measurements: the steady steps are cut
    into ``PARTS`` parts and the share is judged in each; over the threshold in at least three quarters of them
    the finding stands, in more than half it is low and says it is uncertain, otherwise there is none (a spell of
    background load is not the run). The evidence adds the DataLoader's configuration and the time per dataset
    item (dataset fetches timed in the main process or in worker processes). torch-tb-profiler flags DataLoader
    > 5% of a step; we only speak up when the wait is a real bottleneck.

    The advice fits the machine: ``num_workers`` up to one less than the cores (at most 8); ``pin_memory``
    only where a GPU is in use (pinned memory only speeds host-to-device copies); items that wait
    (``IO_WAIT_SHARE`` of their fetch time off the CPU, from the fetching thread's CPU time) overlap in more
    workers than cores: enough that a batch arrives within each step's compute time, ``HEADROOM`` times the fetch
    time per batch over the compute time per step (2 to ``MAX_IO_WORKERS``; twice the cores, 4 to 8, when the item
    time is unknown); ``persistent_workers`` only for a loader iterated more than once; and where the cores were
    already busy (``BUSY_CPU_PERCENT`` on average) or the loader already has a worker per spare core, more workers
    cannot help: the item itself must get cheaper.

Fix:
    Raise ``num_workers`` (the DataLoader line is named), and move heavy per-item work out of ``__getitem__``
    (precompute or cache it); on GPU also ``pin_memory=True``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.profile.analyze import ProfileAnalysis
from infradoctor.profile.rules._common import PARTS, RuleOptions, held_in_parts, location, pct, suggested_workers

RULE = Rule(
    "P001",
    "data-starvation",
    Severity.HIGH,
    "Compute waits for data",
    fix=(
        "Raise DataLoader num_workers (up to the spare cores), move heavy per-item work out of __getitem__ or cache "
        "it; on GPU also pin_memory=True."
    ),
    risk="More workers use more host RAM and CPU; persistent workers keep that memory between epochs.",
    commands=("profile",),
)
DATA_WAIT_FRACTION = 0.30
"""Share of steady step time waiting for data at which the rule fires."""
HIGH_FRACTION = 0.50
"""From this share on the finding is high severity."""
IO_WAIT_SHARE = 0.5
"""Items that spend this share of their fetch time off the CPU (I/O, sleeps) wait rather than compute."""
BUSY_CPU_PERCENT = 90.0
"""Mean CPU use over all cores from which the machine has no core to spare for more workers."""
HEADROOM = 1.5
"""Workers suggested for waiting items: this many times the fetch time per batch over the compute time per step."""
MAX_IO_WORKERS = 32
"""At most this many workers suggested for waiting items (each is a process holding a copy of the dataset object)."""


@RULE.check(ProfileAnalysis, RuleOptions)
def check(analysis: ProfileAnalysis, options: RuleOptions) -> list[Finding]:
    """Data wait share of steady steps."""
    ev = analysis.evidence
    if len(analysis.steady) < options.min_steps or not ev.dataloaders:
        return []
    fraction = analysis.fraction("data_wait")
    if fraction < DATA_WAIT_FRACTION:
        return []
    held, parts = held_in_parts(analysis.steady, lambda s: s.data_wait_s, DATA_WAIT_FRACTION, PARTS)
    if held * 2 <= parts:
        return []  # over the threshold on the whole, but not in most parts of the run: a spell, not the run
    loader = max(ev.dataloaders, key=lambda d: d.wait_s)
    fetch = ev.worker_fetch if ev.worker_fetch.get("items") else ev.fetch
    item_ms = 1000.0 * float(fetch.get("time_s", 0.0)) / fetch["items"] if fetch.get("items") else None
    workers = loader.num_workers or 0
    loc = location(loader.file, loader.line, options)
    wait_ms = 1000.0 * analysis.phase_s["data_wait"] / len(analysis.steady)
    cpu = _mean_cpu_percent(analysis)
    waits = _waiting_share(fetch)
    io_bound = waits is not None and waits >= IO_WAIT_SHARE
    # items that wait (I/O, sleeps) overlap in more workers than cores; CPU-bound items need a core each
    step_ms = analysis.steady_time_s * 1000 / len(analysis.steady)
    needed = _workers_to_keep_up(item_ms, loader.batch_size, step_ms - wait_ms)
    if io_bound:
        spare = needed if needed is not None else min(8, max(4, 2 * (analysis.cores or 2)))
    else:
        spare = suggested_workers(analysis.cores)
    where_built = f" built at {loc}" if loc else ""
    if not io_bound and ((cpu is not None and cpu >= BUSY_CPU_PERCENT) or workers >= spare):
        busy = f"the {analysis.cores or '?'} cores were {cpu:.0f}% busy" if cpu is not None else "no core is spare"
        fix = (f"More workers cannot help here ({busy}; the DataLoader{where_built} has {workers}): make each item "
               "cheaper")
    else:
        if io_bound and needed is not None and item_ms is not None and loader.batch_size and needed > workers:
            why = (f"items spend {waits:.0%} of their time waiting, not computing; a batch takes "
                   f"{item_ms * loader.batch_size:.1f} ms to fetch and a step {step_ms - wait_ms:.1f} ms to compute, "
                   f"so {needed} fetching at once keep ahead with {HEADROOM - 1:.0%} to spare")
        elif io_bound:
            why = f"items spend {waits:.0%} of their time waiting, not computing"
        else:
            why = f"this machine has {analysis.cores or '?'} cores"
        changes = [f"num_workers={max(spare, workers + 1)} (now {workers}; {why})"]
        if ev.device_in_use and not loader.pin_memory:
            changes.append("pin_memory=True")
        if loader.iterators >= 2 and not loader.persistent_workers:
            changes.append("persistent_workers=True")
        fix = f"In the DataLoader{where_built}: set {', '.join(changes)}"
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
        "item_wait_share": round(waits, 3) if waits is not None else None,
        "dataset": loader.dataset,
        "cores": analysis.cores,
        "cpu_percent_mean": round(cpu, 1) if cpu is not None else None,
    }
    evidence["parts_over_threshold"] = f"{held} of {parts}"
    steady = held * 4 >= parts * 3
    severity = (Severity.HIGH if fraction >= HIGH_FRACTION else Severity.MEDIUM) if steady else Severity.LOW
    uncertain = "" if steady else f"; only in {held} of {parts} parts of the run (uncertain: it varies)"
    return [
        RULE.finding(
            f"The loop waits for data {pct(fraction)} of each step ({wait_ms:.1f} ms of "
            f"{step_ms:.1f} ms){uncertain}",
            evidence,
            severity=severity,
            fix=fix,
            location=loc,
            impact=round(fraction, 4),
        )
    ]


def _workers_to_keep_up(item_ms: float | None, batch_size: int | None, compute_ms: float) -> int | None:
    """Workers that, fetching batches side by side, deliver one per step's compute time (with headroom).

    Only for items that wait: their fetches overlap, so a batch arrives every fetch time / workers.
    """
    if item_ms is None or not batch_size or compute_ms <= 0:
        return None
    return max(2, min(MAX_IO_WORKERS, math.ceil(HEADROOM * item_ms * batch_size / compute_ms)))


def _mean_cpu_percent(analysis: ProfileAnalysis) -> float | None:
    """Mean busy percent over all cores during the steady steps (None without samples)."""
    steady = analysis.steady
    samples = [s for s in analysis.evidence.system if s.cpu_percent]
    if steady:
        inside = [s for s in samples if steady[0].start <= s.t <= steady[-1].end + 1.0]
        samples = inside or samples
    if not samples:
        return None
    return sum(sum(s.cpu_percent) / len(s.cpu_percent) for s in samples) / len(samples)


def _waiting_share(fetch: Mapping[str, Any]) -> float | None:
    """Share of fetch time the fetching thread was off the CPU (None when not measured)."""
    wall = float(fetch.get("time_s") or 0.0)
    if wall <= 0 or "cpu_s" not in fetch:
        return None
    return min(1.0, max(0.0, 1.0 - float(fetch["cpu_s"]) / wall))
