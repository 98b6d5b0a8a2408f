"""From a sweep to the ``load`` result's typed metrics (:class:`~infradoctor.load.metrics.LoadMetrics`) and findings.

The *reference point* is the one the headline and the stored distribution describe: the knee, else the
highest-load point where the generator was not saturated. Its p99 is read once, from its histogram; the headline,
the points table, the per-point progress line and the stored distribution (whose nearest-rank percentiles are the
histogram's) all show that one number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, run_rules
from infradoctor.load.evidence import LoadEvidence
from infradoctor.load.metrics import (
    DISTRIBUTION_LIMIT,
    ErrorOnset,
    LoadCurve,
    LoadHeadline,
    LoadMetrics,
    LoadSettings,
    SloResult,
    point_metrics,
)
from infradoctor.load.point import PointResult
from infradoctor.load.sweep import SweepResult

ERROR_ONSET_RATE = 0.01
"""The error onset is the lowest offered load where at least this share of requests failed."""


def reference_point(sweep: SweepResult) -> PointResult | None:
    """The point the headline describes: the knee, else the highest-load non-saturated point, else the last."""
    if not sweep.points:
        return None
    knee = sweep.knee
    if knee is not None:
        return sweep.points[knee.index]
    valid = [p for p in sweep.points if not p.saturated and p.completed]
    pool = valid or sweep.points
    return max(pool, key=lambda p: (p.level, p.completed))


def build_metrics(sweep: SweepResult, settings: LoadSettings) -> LoadMetrics:
    """The typed metrics of a ``load`` result."""
    points = tuple(point_metrics(p) for p in sweep.points)
    knee = sweep.knee
    ref = reference_point(sweep)
    return LoadMetrics(
        mode="open" if sweep.mode == "open" else "closed",
        settings=settings,
        points=points,
        headline=headline(sweep, ref),
        knee=knee.metrics("concurrency" if sweep.mode == "closed" else "rate") if knee is not None else None,
        error_onset=error_onset(sweep),
        reference_point=ref.label if ref is not None else None,
        curve=LoadCurve(
            level=tuple(p.offered for p in points),
            throughput_rps=tuple(p.throughput_rps for p in points),
            p50_ms=tuple(p.latency_ms.p50 for p in points),
            p99_ms=tuple(p.latency_ms.p99 for p in points),
            error_rate=tuple(p.error_rate for p in points),
        ),
        distributions={"latency_ms": tuple(ref.latency.sample_ms(DISTRIBUTION_LIMIT))}
        if ref is not None and ref.latency.count else {},
        stop_reason=sweep.stop_reason,
        slo=SloResult(
            text=sweep.slo.text,
            percentile=sweep.slo.percentile,
            max_ms=sweep.slo.max_ms,
            max_error_rate=sweep.slo.max_error_rate,
            max_rate_rps=round(sweep.slo_max_rate, 3) if sweep.slo_max_rate is not None else None,
            met=sweep.slo_max_rate is not None,
            max_concurrency=sweep.slo_max_concurrency,
        ) if sweep.slo is not None else None,
    )


def error_onset(sweep: SweepResult) -> ErrorOnset | None:
    """The lowest non-saturated load level where errors reach ``ERROR_ONSET_RATE``, with their classes."""
    failing = [p for p in sweep.points if not p.saturated and p.completed and p.error_rate >= ERROR_ONSET_RATE]
    if not failing:
        return None
    point = min(failing, key=lambda p: p.level)
    return ErrorOnset(
        label=point.label,
        level=point.level,
        error_rate=round(point.error_rate, 6),
        errors=dict(sorted(point.errors.items(), key=lambda kv: -kv[1])),
    )


def headline(sweep: SweepResult, ref: PointResult | None) -> LoadHeadline:
    """Key numbers of the reference point; what is not available is None (and left out of the JSON)."""
    if ref is None:
        return LoadHeadline()
    summary = point_metrics(ref).latency_ms
    valid = [p for p in sweep.points if not p.saturated] or sweep.points
    values: dict[str, Any] = {
        "throughput_rps": round(ref.throughput_rps, 3),
        "max_throughput_rps": round(max(p.throughput_rps for p in valid), 3),
        "p50_ms": summary.p50,
        "p99_ms": summary.p99,
        "p99_9_ms": summary.p99_9,
        "error_rate": round(ref.error_rate, 6),
        "requests": sum(p.completed for p in sweep.points),
    }
    knee = sweep.knee
    if knee is not None:
        values["knee_concurrency" if sweep.mode == "closed" else "knee_rate_rps"] = knee.level
        values["knee_throughput_rps"] = round(knee.throughput_rps, 3)
        values["knee_p99_ms"] = round(knee.p99_ms, 3)
    if ref.ttft is not None and ref.ttft.count:
        ttft = ref.ttft.percentiles_us([50.0, 99.0])
        values["ttft_p50_ms"] = round(ttft[0] / 1000.0, 3)
        values["ttft_p99_ms"] = round(ttft[1] / 1000.0, 3)
        if ref.itl is not None and ref.itl.count:
            values["itl_p50_ms"] = round(ref.itl.percentiles_us([50.0])[0] / 1000.0, 3)
        values["output_tokens_per_s"] = round(ref.output_tokens / ref.duration_s, 3) if ref.duration_s > 0 else None
    if sweep.slo_max_rate is not None:
        values["slo_max_rate_rps"] = sweep.slo_max_rate
    return LoadHeadline(**values)


def diagnose(metrics: LoadMetrics | Mapping[str, Any]) -> list[Finding]:
    """Run the load rules over a result's metrics (live or recorded)."""
    return run_rules(LoadEvidence.from_metrics(metrics))
