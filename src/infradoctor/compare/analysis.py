"""Per metric: before, after, change, and whether the change is beyond noise.

Headline metrics (``metrics.headline``) are compared value to value. Where both runs stored raw samples of a
measurement (``metrics.distributions[name]``), its mean, p50 and p99 are compared with a seeded percentile-bootstrap
95% confidence interval of the difference: a change is *significant* when the interval excludes zero. Direction
comes from the metric's name (latency, time, wait, memory, errors: lower is better; throughput, rate, per-second:
higher is better); a significant change in the bad direction is a regression.

``metrics`` layout of a compare result: ``changes`` (list of rows: metric, statistic, before, after, change,
change_pct, ci_low, ci_high, significant, better, regression, source), ``before`` / ``after`` (run ids, labels,
commands), ``headline`` (improvements, regressions, unchanged counts).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
BOOTSTRAP_SEED = 20261129
"""Seed of the comparison's bootstrap (fixed: the same two runs always give the same intervals)."""


@dataclass(frozen=True)
class MetricChange:
    """One row of a comparison."""

    metric: str
    """Metric name (headline key, or distribution name)."""
    statistic: str
    """``value`` for headline metrics, else ``mean``/``p50``/``p99`` of a distribution."""
    before: float
    """Value in the before run."""
    after: float
    """Value in the after run."""
    ci_low: float | None
    """Lower bound of the 95% CI of after - before (None without distributions)."""
    ci_high: float | None
    """Upper bound of that CI."""
    better: str
    """``lower``, ``higher`` or ``unknown``: which direction is an improvement."""
    source: str
    """``headline`` or ``distribution``."""
    comparable: bool = True
    """False when the two runs measured different things under this name (e.g. steps of different sizes)."""
    note: str = ""
    """Why a row is not comparable."""

    @property
    def change(self) -> float:
        """The after value minus the before value."""
        return self.after - self.before

    @property
    def change_pct(self) -> float | None:
        """Relative change in percent, None when before is zero."""
        if self.before == 0 or math.isnan(self.before):
            return None
        return 100.0 * self.change / abs(self.before)

    @property
    def significant(self) -> bool | None:
        """True when the CI excludes zero; None when there is no CI."""
        if self.ci_low is None or self.ci_high is None or math.isnan(self.ci_low):
            return None
        return self.ci_low > 0 or self.ci_high < 0

    @property
    def improved(self) -> bool:
        """Moved in the good direction (significantly, when a CI exists)."""
        return self._moved("good")

    @property
    def regression(self) -> bool:
        """Moved in the bad direction (significantly, when a CI exists; by more than 5% otherwise)."""
        return self._moved("bad")

    @property
    def direction(self) -> str:
        """``better``, ``worse`` or ``same``/``unknown`` by the raw change, whatever the noise."""
        if not self.comparable or self.better == "unknown":
            return "unknown"
        if self.change == 0:
            return "same"
        return "better" if (self.change < 0) == (self.better == "lower") else "worse"

    def _moved(self, which: str) -> bool:
        # Only a confidence interval that excludes zero makes a change an improvement or a regression; a single
        # headline value per run cannot tell a change from noise.
        if self.significant is not True:
            return False
        return self.direction == ("better" if which == "good" else "worse")

    def to_dict(self) -> dict[str, Any]:
        """JSON row."""
        return {
            "metric": self.metric,
            "statistic": self.statistic,
            "before": self.before,
            "after": self.after,
            "change": self.change,
            "change_pct": self.change_pct,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "significant": self.significant,
            "better": self.better,
            "improved": self.improved,
            "direction": self.direction,
            "regression": self.regression,
            "source": self.source,
            "comparable": self.comparable,
            "note": self.note,
        }


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


def run_warnings(before: Result, after: Result) -> list[str]:
    """Reasons the two runs may not measure the same thing, or the after run is not a valid measurement."""
    warnings: list[str] = []
    if before.command != after.command:
        warnings.append(f"the runs come from different commands ({before.command} vs {after.command})")
    for name, run in (("before", before), ("after", after)):
        if run.exit_status not in (None, 0):
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
                MetricChange(
                    metric=name,
                    statistic=stat_name,
                    before=stat(dist_b[name]),
                    after=stat(dist_a[name]),
                    ci_low=low,
                    ci_high=high,
                    better=_direction(name),
                    source="distribution",
                    comparable=comparable(name),
                    note="" if comparable(name) else mismatch,
                )
            )
    head_b = _numbers(before.metrics.get("headline"))
    head_a = _numbers(after.metrics.get("headline"))
    covered = set(dist_b) & set(dist_a)
    head_b = {k: v for k, v in head_b.items() if not _covered_by(k, covered)}
    rows.extend(
        MetricChange(
            metric=name,
            statistic="value",
            before=head_b[name],
            after=head_a[name],
            ci_low=None,
            ci_high=None,
            better=_direction(name),
            source="headline",
            comparable=comparable(name),
            note="" if comparable(name) else mismatch,
        )
        for name in head_b
        if name in head_a
    )
    return rows


def compare_results(before: Result, after: Result, *, resamples: int = 400) -> Result:
    """A ``compare`` result for two runs."""
    rows = compare_changes(before, after, resamples=resamples)
    improvements = sum(r.improved for r in rows)
    regressions = sum(r.regression for r in rows)

    def side(result: Result) -> dict[str, Any]:
        return {
            "run_id": result.run_id,
            "label": result.label,
            "command": result.command,
            "started_at": result.started_at,
            "note": result.note,
            "findings": [f.code for f in result.ranked()],
        }

    fixed = sorted({f.code for f in before.findings} - {f.code for f in after.findings})
    new = sorted({f.code for f in after.findings} - {f.code for f in before.findings})
    return new_result(
        "compare",
        started_at=utc_now_iso(),
        duration_s=0.0,
        target={"before": before.run_id or "", "after": after.run_id or ""},
        metrics={
            "before": side(before),
            "after": side(after),
            "changes": [r.to_dict() for r in rows],
            "findings_resolved": fixed,
            "warnings": run_warnings(before, after),
            "findings_new": new,
            "headline": {
                "improvements": improvements,
                "regressions": regressions,
                "unchanged": len(rows) - improvements - regressions,
            },
        },
    )
