"""Charts for the write-up, drawn from the metrics each command stores (missing data means no chart).

latency vs load (``load``/``profile --load-url`` ``metrics.points``), with the router's and model servers' state
per point under it (``--router-stats``/``--server-metrics``), the fleet's worst series (``fleet``), step-time
breakdown (``profile``
``metrics.steps``), memory over steps (``profile`` ``metrics.memory``), CPU/GPU utilisation over time
(``metrics.system`` or ``node`` samples), per-backend latency (``route`` ``metrics.backends``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from infradoctor.compare.analysis import step_mismatch
from infradoctor.report.svg import Marker, Series, line_chart, stacked_bars
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
    """p99 (and p50) latency against offered load, one line per run, on a log latency axis with the knees marked."""
    series: list[Series] = []
    markers: list[Marker] = []
    x_label = "offered load"
    for run in runs:
        knee = _get(run.metrics, "knee.level", "load.knee.level")
        if _num(knee) is not None:
            markers.append(Marker(float(knee), f"knee ({run_name(run)})"))
        points = _get(run.metrics, "points", "load.points")
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
    return line_chart("Latency vs load", series, x_label=x_label, y_label="latency (ms)", log_x=log_x, log_y=True,
                      markers=markers)


def _load_points(run: Result) -> list[Mapping[str, Any]]:
    points = _get(run.metrics, "points", "load.points")
    if not isinstance(points, Sequence) or isinstance(points, (str, bytes)):
        return []
    return [p for p in points if isinstance(p, Mapping)]


SERVER_SERIES = (("waiting_max", "waiting (max)", 1.0), ("running_mean", "running (mean)", 1.0),
                 ("kv_cache_usage_max", "KV cache % (max)", 100.0), ("preemptions", "preemptions", 1.0))
"""Model-server state per load point: (field, legend, scale)."""
ROUTER_SERIES = (("pending_active", "pending (max)", "gauge"), ("retries", "retries", "counter"),
                 ("retry_overflow", "retries refused", "counter"))
"""Router state per load point: (canonical name, legend, kind)."""


def server_state_vs_load(runs: Sequence[Result]) -> str:
    """What the router and model servers reported at each load point, on the latency chart's load axis.

    From ``--router-stats``/``--server-metrics``: queues, KV cache, preemptions, retries.
    """
    series: list[Series] = []
    x_label = "offered load"
    for run in runs:
        lines: dict[str, list[tuple[float, float]]] = {}
        for point in _load_points(run):
            x = _num(_get(point, "concurrency", "rate"))
            telemetry = _get(point, "observations.telemetry")
            if x is None or not isinstance(telemetry, Mapping):
                continue
            x_label = "concurrency" if _get(point, "concurrency") is not None else "offered rate (req/s)"
            for server in telemetry.get("servers") or ():
                if not isinstance(server, Mapping):
                    continue
                for key, legend, scale in SERVER_SERIES:
                    value = _num(server.get(key))
                    if value is not None:
                        lines.setdefault(legend, []).append((x, value * scale))
            for router in telemetry.get("routers") or ():
                if not isinstance(router, Mapping):
                    continue
                for key, legend, kind in ROUTER_SERIES:
                    path = f"gauges.{key}.max" if kind == "gauge" else f"counters.{key}"
                    value = _num(_get(router, path))
                    if value is not None:
                        lines.setdefault(f"router {legend}", []).append((x, value))
        dashed = bool(run.label and "base" in run.label.lower())
        series += [Series(f"{run_name(run)} {legend}", sorted(pts), dashed=dashed)
                   for legend, pts in lines.items() if any(v for _, v in pts)]
    log_x = x_label == "concurrency"
    return line_chart("Router and model-server state vs load", series[:8], x_label=x_label,
                      y_label="requests / % / count", log_x=log_x)


def step_breakdown(runs: Sequence[Result]) -> str:
    """Mean step time split by phase, one bar per profile run (per sample when the runs' steps differ in size)."""
    bars: list[tuple[str, list[tuple[str, float]]]] = []
    per_sample = len(runs) == 2 and bool(step_mismatch(runs[0], runs[1]))
    for run in runs:
        if _get(run.metrics, "service") is not None:
            continue  # a server's "steps" are requests; its load curve says more
        phases = _get(run.metrics, "steps.phase_ms_per_step", "steps.phase_ms", "steps.per_phase_ms")
        if not isinstance(phases, Mapping):
            continue
        scale = 1.0
        if per_sample:
            samples = _num(_get(run.metrics, "headline.samples_per_s"))
            steps = _num(_get(run.metrics, "headline.steps_per_s"))
            if not samples or not steps:
                continue
            scale = steps / samples
        parts = [(str(k), v * scale) for k, v in ((k, _num(v)) for k, v in phases.items()) if v is not None and v > 0]
        if parts:
            bars.append((run_name(run), parts))
    if per_sample:
        return stacked_bars("Time per sample by phase", bars, unit="ms")
    return stacked_bars("Step time by phase", bars, unit="ms")


def _timeline(run: Result, path: str) -> list[dict[str, Any]]:
    """Rows of a ``{columns, rows}`` timeline as dicts."""
    table = _get(run.metrics, path)
    if not isinstance(table, Mapping):
        return []
    columns, rows = table.get("columns"), table.get("rows")
    if not isinstance(columns, Sequence) or not isinstance(rows, Sequence):
        return []
    return [dict(zip(columns, row, strict=False)) for row in rows if isinstance(row, Sequence)]


def memory_over_steps(runs: Sequence[Result]) -> str:
    """Process memory per step, one line per run; runs of very different lengths share an axis of run progress."""
    lines: list[tuple[Result, list[tuple[float, float]]]] = []
    for run in runs:
        pts = []
        for row in _timeline(run, "memory.timeline"):
            step, mb = _num(row.get("step")), _num(row.get("pss_mb", row.get("rss_mb")))
            if step is not None and mb is not None:
                pts.append((step, mb))
        if len(pts) >= 2:
            lines.append((run, pts))
    lengths = [max(x for x, _ in pts) for _, pts in lines]
    progress = len(lengths) > 1 and max(lengths) > 2 * max(1.0, min(lengths))
    series = []
    for (run, pts), length in zip(lines, lengths, strict=True):
        if progress:  # 62 steps beside 849: compare shapes over each run's own length
            pts = [(100.0 * x / max(length, 1.0), y) for x, y in pts]
        series.append(Series(run_name(run), pts, dashed=bool(run.label and "base" in run.label.lower())))
    x_label = "% of the run's steps" if progress else "step"
    return line_chart("Memory over steps", series, x_label=x_label, y_label="MB")


def utilisation_over_time(runs: Sequence[Result]) -> str:
    """Machine CPU, the workload's CPU and GPU utilisation over time."""
    series: list[Series] = []
    for run in runs:
        rows = _timeline(run, "system.timeline")
        for key, name in (("process_cpu_percent", "workload CPU %"), ("gpu_util", "GPU %")):
            pts = [
                (t, v)
                for t, v in ((_num(r.get("t_s")), _num(r.get(key))) for r in rows)
                if t is not None and v is not None
            ]
            if len(pts) >= 2:
                series.append(Series(f"{run_name(run)} {name}", pts))
    return line_chart("Utilisation over time", series[:8], x_label="seconds", y_label="%")


def backend_latency(runs: Sequence[Result]) -> str:
    """p50 and p99 per path (through the router and straight to each backend) from route runs."""
    bars: list[tuple[str, list[tuple[str, float]]]] = []
    for run in runs:
        paths = _get(run.metrics, "paths")
        if not isinstance(paths, Sequence) or isinstance(paths, (str, bytes)) or run.command != "route":
            continue
        for path in paths:
            if not isinstance(path, Mapping):
                continue
            name = str(path.get("name") or path.get("url") or "?")
            p50 = _num(_get(path, "p50_ms.value", "p50_ms"))
            p99 = _num(_get(path, "p99_ms.value", "p99_ms"))
            if p50 is not None and p99 is not None:
                bars.append((name[-32:], [("p50", p50), ("p99 - p50", max(p99 - p50, 0.0))]))
    return stacked_bars("Latency per path (router vs direct)", bars, unit="ms")


def fleet_timeline(runs: Sequence[Result]) -> str:
    """The worst series of each fleet run over its window, against the fleet median (``infradoctor fleet``)."""
    from infradoctor.report.present.fleet import timeline_chart

    return "".join(timeline_chart(run) for run in runs if run.command == "fleet")


def all_charts(runs: Sequence[Result]) -> list[str]:
    """Every chart the runs have data for."""
    makers = (latency_vs_load, server_state_vs_load, step_breakdown, memory_over_steps, utilisation_over_time,
              backend_latency, fleet_timeline)
    return [svg for svg in (make(runs) for make in makers) if svg]
