"""From a sweep to the ``load`` result's ``metrics`` and findings.

``metrics`` layout (the ``load`` command's part of the result contract)::

    mode            "closed" | "open"
    settings        {url, method, timeout_s, duration_s, requests, arrivals, stream, openai, ...}
    points[]        one per offered load, in run order (PointResult.to_dict): label, concurrency | rate, offered,
                    throughput_rps, goodput_rps, error_rate, errors {class: n}, status_counts,
                    latency_ms {count, min, mean, p50, p90, p95, p99, p99_9, max, p99_ci [lo, hi]},
                    latency_from_send_ms (open loop), pacer_lag_ms (open loop), server_timing_ms {stage: {...}},
                    network_queue_ms, stream {ttft_ms, itl_ms, output_tokens, output_tokens_per_s}, windows[],
                    first_latencies_ms, client_cpu_fraction, saturated, saturation_reason, interrupted
    knee            null | {kind, level, concurrency|rate, throughput_rps, p99_ms, level_range, next, ...}
    error_onset     null | {label, level, error_rate, errors}: the lowest load where >= 1% of requests failed
    reference_point label of the point the headline and distributions describe (the knee, else the highest
                    non-saturated point)
    headline        {throughput_rps, max_throughput_rps, p50_ms, p99_ms, p99_9_ms, error_rate, knee_*, ttft_p99_ms...}
    distributions   {latency_ms: [...]} bounded (<= 5000) deterministic sample at the reference point
    curve           {level: [...], throughput_rps: [...], p99_ms: [...]} latency-vs-load plot data
    slo             rate search: {text, percentile, max_ms, max_rate_rps, met}
    stop_reason     why the sweep ended
    calibration     --calibrate: the generator's ceiling against the null server
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, run_rules
from infradoctor.load.engine import PointResult
from infradoctor.load.evidence import LoadEvidence
from infradoctor.load.sweep import SweepResult


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


def build_metrics(sweep: SweepResult, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The ``metrics`` of a ``load`` result (layout in the module docstring)."""
    points = [p.to_dict() for p in sweep.points]
    knee = sweep.knee
    kind = "concurrency" if sweep.mode == "closed" else "rate"
    ref = reference_point(sweep)
    metrics: dict[str, Any] = {
        "mode": sweep.mode,
        "settings": dict(settings),
        "points": points,
        "knee": knee.to_dict(kind) if knee is not None else None,
        "stop_reason": sweep.stop_reason,
        "reference_point": ref.label if ref is not None else None,
        "curve": {
            "level": [p["offered"] for p in points],
            "throughput_rps": [p["throughput_rps"] for p in points],
            "p50_ms": [p["latency_ms"].get("p50") for p in points],
            "p99_ms": [p["latency_ms"].get("p99") for p in points],
            "error_rate": [p["error_rate"] for p in points],
        },
        "headline": headline(sweep, ref),
        "distributions": {"latency_ms": [round(v, 4) for v in ref.sample_ms]} if ref is not None else {},
    }
    metrics["error_onset"] = error_onset(sweep)
    if sweep.slo is not None:
        metrics["slo"] = {
            **sweep.slo.to_dict(),
            "max_rate_rps": sweep.slo_max_rate,
            "met": sweep.slo_max_rate is not None,
        }
    return metrics


ERROR_ONSET_RATE = 0.01
"""The error onset is the lowest offered load where at least this share of requests failed."""


def error_onset(sweep: SweepResult) -> dict[str, Any] | None:
    """The lowest non-saturated load level where errors reach ``ERROR_ONSET_RATE``, with their classes."""
    failing = [p for p in sweep.points if not p.saturated and p.completed and p.error_rate >= ERROR_ONSET_RATE]
    if not failing:
        return None
    point = min(failing, key=lambda p: p.level)
    return {
        "label": point.label,
        "level": point.level,
        "error_rate": round(point.error_rate, 6),
        "errors": dict(sorted(point.errors.items(), key=lambda kv: -kv[1])),
    }


def headline(sweep: SweepResult, ref: PointResult | None) -> dict[str, float | int | None]:
    """Flat key numbers with units in their names."""
    out: dict[str, float | int | None] = {}
    if ref is None:
        return out
    summary = ref.latency.summary_ms()
    out["throughput_rps"] = round(ref.throughput_rps, 3)
    valid = [p for p in sweep.points if not p.saturated] or sweep.points
    out["max_throughput_rps"] = round(max(p.goodput_rps for p in valid), 3)
    for key in ("p50", "p99", "p99_9"):
        value = summary.get(key)
        out[f"{key}_ms"] = value if isinstance(value, (int, float)) else None
    out["error_rate"] = round(ref.error_rate, 6)
    out["requests"] = sum(p.completed for p in sweep.points)
    knee = sweep.knee
    if knee is not None:
        out["knee_concurrency" if sweep.mode == "closed" else "knee_rate_rps"] = knee.level
        out["knee_throughput_rps"] = round(knee.throughput_rps, 3)
        out["knee_p99_ms"] = round(knee.p99_ms, 3)
    if ref.ttft is not None and ref.ttft.count:
        ttft = ref.ttft.percentiles_us([50.0, 99.0])
        out["ttft_p50_ms"] = round(ttft[0] / 1000.0, 3)
        out["ttft_p99_ms"] = round(ttft[1] / 1000.0, 3)
        if ref.itl is not None and ref.itl.count:
            out["itl_p50_ms"] = round(ref.itl.percentiles_us([50.0])[0] / 1000.0, 3)
        out["output_tokens_per_s"] = round(ref.output_tokens / ref.duration_s, 3) if ref.duration_s > 0 else None
    if sweep.slo_max_rate is not None:
        out["slo_max_rate_rps"] = sweep.slo_max_rate
    return {k: v for k, v in out.items() if v is None or math.isfinite(float(v))}


def diagnose(metrics: Mapping[str, Any]) -> list[Finding]:
    """Run the load rules over a result's metrics (live or recorded)."""
    return run_rules(LoadEvidence.from_metrics(metrics))
