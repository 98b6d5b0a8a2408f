"""Per metric: before, after, change, and whether the change is beyond noise.

Headline metrics (``metrics.headline``) are compared value to value. Where both runs stored raw samples of a
measurement (``metrics.distributions[name]``), its mean, p50 and p99 are compared with a seeded percentile-bootstrap
95% confidence interval of the difference: a change is *significant* when the interval excludes zero. Direction
comes from the metric's name (latency, time, wait, memory, errors: lower is better; throughput, rate, per-second:
higher is better); a significant change in the bad direction is a regression.

A change is judged only where it can be: an interval needs at least :data:`MIN_SAMPLES` samples on each side
(fewer are "too few samples"); a headline value without an interval is never called better or worse beyond noise:
it is "higher"/"lower" (or "about the same" within :data:`MATERIAL_PCT`), counted apart. Runs that were interrupted
or failed are not compared as if complete (the verdicts say "not judged").

``metrics`` of a compare result: :class:`CompareMetrics` (``changes``: one :class:`MetricChange` per metric and
statistic; ``before`` / ``after``: the runs; ``findings_gone`` (with the reason where known) / ``findings_new``;
``warnings``; ``headline``: improvements, regressions, within_noise, not_judged, not_comparable).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infradoctor.metrics import Metrics
from infradoctor.result import Result, new_result, utc_now_iso
from infradoctor.stats import bootstrap_differences, statistic

_HIGHER_BETTER = re.compile(
    r"(throughput|per_s|_rps|rps$|qps|samples_s|tokens_s|goodput|speedup|hit_rate|"
    r"utilization|utilisation|_ok$|success)"
)
_LOWER_BETTER = re.compile(
    r"(latency|_ms$|_s$|time|wait|ttft|itl|rss|memory|_mb$|_bytes$|error|fail|timeout|"
    r"overhead|lag|blocked|fraction|loads|syncs|growth|retries|queue)"
)
DISTRIBUTION_STATS = ("mean", "p50", "p99")
MIN_SAMPLES = 30
"""Samples each run needs in a distribution before its interval is used to call a change beyond noise."""
MATERIAL_PCT = 5.0
"""A change without an interval smaller than this (percent) is reported as "about the same", not as a move."""
BOOTSTRAP_SEED = 20261129
"""Seed of the comparison's bootstrap (fixed: the same two runs always give the same intervals)."""


@dataclass(frozen=True)
class MetricChange(Metrics):
    """One row of a comparison: a metric's before and after, the change, and what can be said about it.

    Built with :meth:`build`, which derives the judgement (``significant`` ... ``verdict``) from the numbers.
    """

    metric: str
    """Metric name (headline key, or distribution name)."""
    statistic: str
    """``value`` for headline metrics, else ``mean``/``p50``/``p99`` of a distribution."""
    before: float
    """Value in the before run."""
    after: float
    """Value in the after run."""
    change: float
    """after - before."""
    change_pct: float | None
    """Relative change in percent, None when before is zero."""
    ci_low: float | None
    """Lower bound of the 95% CI of after - before (None without distributions)."""
    ci_high: float | None
    """Upper bound of that CI."""
    n_before: int | None
    """Samples behind the before value (distributions only)."""
    n_after: int | None
    """Samples behind the after value."""
    better: str
    """``lower``, ``higher`` or ``unknown``: which direction is an improvement."""
    direction: str
    """``better``, ``worse``, ``same`` or ``unknown`` by the raw change, whatever the noise."""
    significant: bool | None
    """True when a usable interval excludes zero, False when it includes it, None without one."""
    improved: bool
    """Better beyond noise."""
    regression: bool
    """Worse beyond noise."""
    verdict: str
    """What the numbers allow one to say, in words (the tables' last column)."""
    kind: str
    """The headline bucket: improvement, regression, within_noise, not_judged or not_comparable."""
    source: str
    """``headline`` or ``distribution``."""
    comparable: bool = True
    """False when the two runs measured different things under this name (e.g. steps of different sizes)."""
    judged: bool = True
    """False when the runs cannot be compared as complete (one was interrupted or failed): no verdict."""
    note: str = ""
    """Why a row is not comparable."""

    @classmethod
    def build(
        cls,
        metric: str,
        statistic: str,
        before: float,
        after: float,
        *,
        better: str,
        source: str,
        ci: tuple[float, float] | None = None,
        n: tuple[int, int] | None = None,
        comparable: bool = True,
        judged: bool = True,
        note: str = "",
    ) -> MetricChange:
        """A row with its judgement derived from the numbers."""
        change = after - before
        pct = None if before == 0 or math.isnan(before) else 100.0 * change / abs(before)
        low, high = ci if ci is not None else (None, None)
        usable = (low is not None and high is not None and math.isfinite(low) and math.isfinite(high)
                  and n is not None and min(n) >= MIN_SAMPLES)
        if not comparable or better == "unknown":
            direction = "unknown"
        elif change == 0:
            direction = "same"
        else:
            direction = "better" if (change < 0) == (better == "lower") else "worse"
        significant = (low > 0 or high < 0) if usable and judged and low is not None and high is not None else None
        improved = significant is True and direction == "better"
        regression = significant is True and direction == "worse"
        if not comparable:
            verdict, kind = "not comparable", "not_comparable"
        elif not judged:
            verdict, kind = "not judged (incomplete run)", "not_judged"
        elif ci is not None and not usable:
            verdict, kind = f"too few samples (n={min(n) if n else 0})", "not_judged"
        elif significant is True:
            verdict = "better" if improved else "REGRESSION" if regression else "changed"
            kind = "improvement" if improved else "regression" if regression else "not_judged"
        elif significant is False:
            verdict, kind = "within noise", "within_noise"
        elif change == 0:
            verdict, kind = "same", "not_judged"
        elif pct is not None and abs(pct) < MATERIAL_PCT:
            verdict, kind = "about the same, no interval", "not_judged"
        else:
            word = direction if direction in ("better", "worse") else "higher" if change > 0 else "lower"
            verdict, kind = f"{word}, no interval", "not_judged"
        return cls(metric, statistic, before, after, change, pct, low, high, n[0] if n else None,
                   n[1] if n else None, better, direction, significant, improved, regression, verdict, kind, source,
                   comparable, judged, note)


@dataclass(frozen=True)
class RunSide(Metrics):
    """One of the two runs compared."""

    run_id: str | None
    """Its id in the store."""
    label: str | None
    """Its label."""
    command: str
    """The command that made it."""
    started_at: str
    """When it started."""
    note: str | None = None
    """Its note (what was changed before it)."""
    findings: tuple[str, ...] = ()
    """Its finding codes, ranked."""
    complete: bool = True
    """False when it was interrupted or its workload failed."""


@dataclass(frozen=True)
class GoneFinding(Metrics):
    """A finding of the before run that the after run does not report."""

    code: str
    """Its code."""
    reason: str = ""
    """Why it is no longer found, where known (e.g. the after sweep found no knee to judge it at); else empty."""


@dataclass(frozen=True)
class CompareHeadline(Metrics):
    """Counts of the comparison's rows by what can be said about them."""

    improvements: int = 0
    """Better beyond noise."""
    regressions: int = 0
    """Worse beyond noise."""
    within_noise: int = 0
    """Moved less than the interval allows one to tell."""
    not_judged: int = 0
    """No usable interval (one value per run, too few samples, an incomplete run): counted apart."""
    not_comparable: int = 0
    """The two runs measured different things under this name."""


@dataclass(frozen=True)
class CompareMetrics(Metrics):
    """Metrics of ``infradoctor compare``."""

    before: RunSide
    """The run before the change."""
    after: RunSide
    """The run after it."""
    headline: CompareHeadline = field(default_factory=CompareHeadline)
    """Counts by verdict."""
    changes: tuple[MetricChange, ...] = ()
    """One row per metric and statistic present in both runs."""
    findings_gone: tuple[GoneFinding, ...] = ()
    """Codes the before run reported and the after run does not (not a claim that a fix was applied)."""
    findings_new: tuple[str, ...] = ()
    """Codes only the after run reports."""
    warnings: tuple[str, ...] = ()
    """Why the runs may not measure the same thing, or are not complete."""



def lower_is_better(metric: str) -> bool | None:
    """True/False from the metric's name; None when the name says nothing."""
    name = metric.lower()
    if _HIGHER_BETTER.search(name):
        return False
    if _LOWER_BETTER.search(name):
        return True
    return None


def _direction(metric: str) -> str:
    lower = lower_is_better(metric)
    return "unknown" if lower is None else ("lower" if lower else "higher")


def _numbers(mapping: Any) -> dict[str, float]:
    if not isinstance(mapping, Mapping):
        return {}
    out: dict[str, float] = {}
    for key, value in mapping.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value)):
            out[str(key)] = float(value)
    return out


def _distributions(result: Result) -> dict[str, list[float]]:
    raw = result.metrics.get("distributions") if isinstance(result.metrics, Mapping) else None
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, list[float]] = {}
    for key, values in raw.items():
        if isinstance(values, Sequence) and not isinstance(values, (str, bytes)):
            clean = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(float(v))]
            if clean:
                out[str(key)] = clean
    return out


_PER_STEP = re.compile(r"^steps?(_|$)")
_LATENCY_PERCENTILE = re.compile(r"^(p\d+(_\d+)?|mean)_ms$")


def _covered_by(headline_key: str, distributions: set[str]) -> bool:
    """True when a headline value is a statistic of a distribution both runs stored (it would repeat its row)."""
    for name in distributions:
        if headline_key.startswith(f"{name}_p") or headline_key == f"{name}_mean":
            return True
        if name == "latency_ms" and _LATENCY_PERCENTILE.match(headline_key):
            return True
    return False


def interrupted(run: Result) -> bool:
    """True when Ctrl-C or SIGTERM cut the run short (its partial result was kept)."""
    return run.exit_status == 130 or any(e.source.endswith(".interrupted") for e in run.errors)


def run_complete(run: Result) -> bool:
    """False when the run was interrupted or its workload failed: it is not compared as if complete."""
    return not interrupted(run) and run.exit_status in (None, 0)


def run_warnings(before: Result, after: Result) -> list[str]:
    """Reasons the two runs may not measure the same thing, or the after run is not a valid measurement."""
    warnings: list[str] = []
    if before.command != after.command:
        warnings.append(f"the runs come from different commands ({before.command} vs {after.command})")
    for name, run in (("before", before), ("after", after)):
        if interrupted(run):
            warnings.append(f"the {name} run was interrupted: its numbers are partial and not judged")
        elif run.exit_status not in (None, 0):
            warnings.append(f"the {name} run's workload exited with status {run.exit_status}")
        if any(e.source not in ("store", "kernel-log") for e in run.errors):
            sources = sorted({e.source for e in run.errors})
            warnings.append(f"the {name} run is partial ({', '.join(sources)})")
    return warnings


def _samples_per_step(result: Result) -> float | None:
    head = _numbers(result.metrics.get("headline"))
    samples, steps = head.get("samples_per_s"), head.get("steps_per_s")
    if samples is None or not steps:
        return None
    return samples / steps


def step_mismatch(before: Result, after: Result) -> str:
    """Why per-step metrics of two runs are not comparable (different samples per step), or ``""``."""
    b, a = _samples_per_step(before), _samples_per_step(after)
    if b is None or a is None or b <= 0 or a <= 0:
        return ""
    if max(a, b) / min(a, b) > 1.1:
        return f"steps differ in size ({b:.3g} vs {a:.3g} samples per step): compare per-sample metrics"
    return ""


def compare_changes(before: Result, after: Result, *, resamples: int = 400) -> list[MetricChange]:
    """Rows for every headline metric and distribution statistic present in both runs."""
    rows: list[MetricChange] = []
    mismatch = step_mismatch(before, after)
    judged = run_complete(before) and run_complete(after)

    def comparable(name: str) -> bool:
        return not (mismatch and _PER_STEP.match(name))

    dist_b, dist_a = _distributions(before), _distributions(after)
    for name in sorted(set(dist_b) & set(dist_a)):
        intervals = bootstrap_differences(dist_a[name], dist_b[name], DISTRIBUTION_STATS, resamples=resamples,
                                          seed=BOOTSTRAP_SEED)
        for stat_name in DISTRIBUTION_STATS:
            stat = statistic(stat_name)
            _diff, low, high = intervals[stat_name]
            rows.append(
                MetricChange.build(
                    name,
                    stat_name,
                    stat(dist_b[name]),
                    stat(dist_a[name]),
                    ci=(low, high),
                    n=(len(dist_b[name]), len(dist_a[name])),
                    better=_direction(name),
                    source="distribution",
                    comparable=comparable(name),
                    note="" if comparable(name) else mismatch,
                    judged=judged,
                )
            )
    head_b = _numbers(before.metrics.get("headline"))
    head_a = _numbers(after.metrics.get("headline"))
    covered = set(dist_b) & set(dist_a)
    head_b = {k: v for k, v in head_b.items() if not _covered_by(k, covered)}
    rows.extend(
        MetricChange.build(
            name,
            "value",
            head_b[name],
            head_a[name],
            better=_direction(name),
            source="headline",
            comparable=comparable(name),
            note="" if comparable(name) else mismatch,
            judged=judged,
        )
        for name in head_b
        if name in head_a
    )
    return rows


_NEEDS_KNEE = frozenset({"S003", "S008"})
_NEEDS_SWEEP = frozenset({"S001", "S003", "S005", "S008"})


def gone_reason(code: str, after: Result) -> str:
    """Why a finding may be absent from the after run for a reason other than a fix, where that is known."""
    if interrupted(after):
        return "the after run was interrupted before it could be judged"
    if after.exit_status not in (None, 0):
        return f"the after run's workload exited with status {after.exit_status}"
    metrics = after.metrics if isinstance(after.metrics, Mapping) else {}
    load = metrics.get("load") if isinstance(metrics.get("load"), Mapping) else metrics
    if code in _NEEDS_SWEEP and isinstance(load, Mapping):
        points = load.get("points")
        if isinstance(points, list) and len(points) < 2:
            return "the after run measured fewer than two load levels"
        if code in _NEEDS_KNEE and "knee" in load and load.get("knee") is None:
            return "the after sweep found no knee, so what happens past it was not measured"
    return ""


def compare_results(before: Result, after: Result, *, resamples: int = 400) -> Result:
    """A ``compare`` result for two runs."""
    rows = compare_changes(before, after, resamples=resamples)
    kinds = [r.kind for r in rows]

    def side(result: Result) -> RunSide:
        return RunSide(result.run_id, result.label, result.command, result.started_at, result.note,
                       tuple(f.code for f in result.ranked()), run_complete(result))

    gone = sorted({f.code for f in before.findings} - {f.code for f in after.findings})
    new = sorted({f.code for f in after.findings} - {f.code for f in before.findings})
    metrics = CompareMetrics(
        before=side(before),
        after=side(after),
        headline=CompareHeadline(
            improvements=kinds.count("improvement"),
            regressions=kinds.count("regression"),
            within_noise=kinds.count("within_noise"),
            not_judged=kinds.count("not_judged"),
            not_comparable=kinds.count("not_comparable"),
        ),
        changes=tuple(rows),
        findings_gone=tuple(GoneFinding(code, gone_reason(code, after)) for code in gone),
        findings_new=tuple(new),
        warnings=tuple(run_warnings(before, after)),
    )
    return new_result(
        "compare",
        started_at=utc_now_iso(),
        duration_s=0.0,
        target={"before": before.run_id or "", "after": after.run_id or "",
                "description": f"{_name(before)} compared with {_name(after)}"},
        metrics=metrics.to_dict(),
    )


def _name(run: Result) -> str:
    """A run in words for the comparison's title: ``train-baseline (profile)``, ``run 20261129-1 (load)``."""
    if run.label:
        return f"{run.label} ({run.command})"
    if run.run_id:
        return f"run {run.run_id} ({run.command})"
    return f"an unlabelled {run.command} run"
