"""Charts for the write-up, drawn from the metrics each command stores (missing data means no chart).

latency vs load (``load``/``profile --load-url`` ``metrics.points``), step-time breakdown (``profile``
``metrics.steps``), memory over steps (``profile`` ``metrics.memory``), CPU/GPU utilisation over time
(``metrics.system`` or ``node`` samples), per-backend latency (``route`` ``metrics.backends``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from infradoctor.report.svg import Series, line_chart, stacked_bars
from infradoctor.result import Result


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


def _get(mapping: Any, *paths: str) -> Any:
    """First present value among dotted paths."""
    for path in paths:
        node = mapping
        for part in path.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            else:
                node = None
                break
        if node is not None:
            return node
    return None


def run_name(run: Result) -> str:
    """Legend name of a run."""
    return run.label or (run.run_id or run.command)


def latency_vs_load(runs: Sequence[Result]) -> str:
    """p99 (and p50) latency against offered load, one line per run."""
    series: list[Series] = []
    x_label = "offered load"
    for run in runs:
        points = run.metrics.get("points") if isinstance(run.metrics, Mapping) else None
        if not isinstance(points, Sequence) or isinstance(points, (str, bytes)):
            continue
        p99: list[tuple[float, float]] = []
        p50: list[tuple[float, float]] = []
        for point in points:
            if not isinstance(point, Mapping):
                continue
            x = _num(_get(point, "concurrency", "rate", "offered"))
            if _get(point, "concurrency") is not None:
                x_label = "concurrency"
            elif _get(point, "rate") is not None:
                x_label = "offered rate (req/s)"
            y99 = _num(_get(point, "latency_ms.p99", "p99_ms", "latency.p99_ms", "latency_ms_p99"))
            y50 = _num(_get(point, "latency_ms.p50", "p50_ms", "latency.p50_ms", "latency_ms_p50"))
            if x is None:
                continue
            if y99 is not None:
                p99.append((x, y99))
            if y50 is not None:
                p50.append((x, y50))
        dashed = bool(run.label and "base" in run.label.lower())
        if p99:
            series.append(Series(f"{run_name(run)} p99", sorted(p99), dashed=dashed))
        if p50:
            series.append(Series(f"{run_name(run)} p50", sorted(p50), dashed=dashed))
    log_x = x_label == "concurrency"
    return line_chart("Latency vs load", series, x_label=x_label, y_label="latency (ms)", log_x=log_x)


def step_breakdown(runs: Sequence[Result]) -> str:
    """Mean step time split by phase, one bar per profile run."""
    bars: list[tuple[str, list[tuple[str, float]]]] = []
    for run in runs:
        phases = _get(run.metrics, "steps.phase_ms", "steps.phases_ms", "steps.per_phase_ms", "steps.breakdown_ms")
        if not isinstance(phases, Mapping):
            continue
        parts = [(str(k), v) for k, v in ((k, _num(v)) for k, v in phases.items()) if v is not None and v > 0]
        if parts:
            bars.append((run_name(run), parts))
    return stacked_bars("Step time by phase", bars, unit="ms")


def memory_over_steps(runs: Sequence[Result]) -> str:
    """Live memory per step, one line per run."""
    series: list[Series] = []
    for run in runs:
        values = _get(run.metrics, "memory.per_step_mb", "memory.series_mb", "memory.live_mb")
        if isinstance(values, Sequence) and not isinstance(values, (str, bytes)):
            pts = [(float(i), v) for i, v in enumerate(_num(x) for x in values) if v is not None]
            if pts:
                series.append(Series(run_name(run), pts, dashed=bool(run.label and "base" in run.label.lower())))
    return line_chart("Memory over steps", series, x_label="step", y_label="MB")


def utilisation_over_time(runs: Sequence[Result]) -> str:
    """CPU and GPU utilisation samples over time."""
    series: list[Series] = []
    for run in runs:
        samples = _get(run.metrics, "system.samples", "samples")
        if not isinstance(samples, Sequence) or isinstance(samples, (str, bytes)):
            continue
        for key, name in (("cpu_percent", "CPU %"), ("gpu_util_percent", "GPU %")):
            pts = []
            for sample in samples:
                if isinstance(sample, Mapping):
                    t, v = _num(sample.get("t")), _num(sample.get(key))
                    if t is not None and v is not None:
                        pts.append((t, v))
            if pts:
                series.append(Series(f"{run_name(run)} {name}", pts))
    return line_chart("Utilisation over time", series, x_label="seconds", y_label="%")


def backend_latency(runs: Sequence[Result]) -> str:
    """p50/p99 per backend from route runs."""
    bars: list[tuple[str, list[tuple[str, float]]]] = []
    for run in runs:
        backends = _get(run.metrics, "backends")
        if not isinstance(backends, Sequence) or isinstance(backends, (str, bytes)):
            continue
        for backend in backends:
            if not isinstance(backend, Mapping):
                continue
            name = str(backend.get("url") or backend.get("name") or "?")
            p50 = _num(_get(backend, "latency_ms.p50", "p50_ms"))
            p99 = _num(_get(backend, "latency_ms.p99", "p99_ms"))
            if p50 is not None and p99 is not None:
                bars.append((f"{run_name(run)} {name}"[-40:], [("p50", p50), ("p99 - p50", max(p99 - p50, 0.0))]))
    return stacked_bars("Latency per backend", bars, unit="ms")


def all_charts(runs: Sequence[Result]) -> list[str]:
    """Every chart the runs have data for."""
    makers = (latency_vs_load, step_breakdown, memory_over_steps, utilisation_over_time, backend_latency)
    return [svg for svg in (make(runs) for make in makers) if svg]
