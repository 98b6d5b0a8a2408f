"""Human sections of a ``load`` result, built from ``result.metrics`` (every renderer shows them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.report.sections import Section, Table, format_value
from infradoctor.result import Result


def _get(mapping: Any, key: str) -> Any:
    return mapping.get(key) if isinstance(mapping, Mapping) else None


def _errors_text(errors: Mapping[str, int], limit: int = 3) -> str:
    if not errors:
        return ""
    ordered = sorted(errors.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {count}" for name, count in ordered[:limit])


def sections(result: Result) -> list[Section]:
    """Points table, knee, open-loop correction, server stages, streaming and calibration."""
    metrics = result.metrics
    points = [p for p in metrics.get("points") or () if isinstance(p, Mapping)]
    out: list[Section] = []
    knee = metrics.get("knee")
    knee_label = None
    if isinstance(knee, Mapping):
        kind = knee.get("kind")
        knee_label = f"c={knee.get('level'):g}" if kind == "concurrency" else f"r={knee.get('level'):g}"
    if points:
        rows = []
        for p in points:
            lat = p.get("latency_ms") or {}
            ci = lat.get("p99_ci") or [None, None]
            flags = []
            if p.get("label") == knee_label:
                flags.append("knee")
            if p.get("saturated"):
                flags.append("client saturated")
            if p.get("interrupted"):
                flags.append("interrupted")
            rows.append(
                (
                    p.get("label"),
                    p.get("throughput_rps"),
                    lat.get("p50"),
                    lat.get("p90"),
                    lat.get("p99"),
                    f"{ci[0]:.3g}-{ci[1]:.3g}" if ci[0] is not None and ci[1] is not None else None,
                    lat.get("p99_9"),
                    lat.get("max"),
                    f"{100 * float(p.get('error_rate') or 0):.2f}%",
                    _errors_text(p.get("errors") or {}),
                    p.get("client_cpu_fraction"),
                    " ".join(flags),
                )
            )
        mode = metrics.get("mode")
        title = (
            "closed loop: latency from issue time (ms)"
            if mode == "closed"
            else "open loop: latency from intended send time, corrected for coordinated omission (ms)"
        )
        out.append(
            Section(
                "Load points",
                tables=[
                    Table(
                        columns=(
                            "point",
                            "req/s",
                            "p50",
                            "p90",
                            "p99",
                            "p99 95% CI",
                            "p99.9",
                            "max",
                            "errors",
                            "error classes",
                            "client cpu",
                            "flags",
                        ),
                        rows=rows,
                        title=title,
                    )
                ],
                lines=[f"sweep ended: {metrics.get('stop_reason')}"] if metrics.get("stop_reason") else [],
            )
        )
    lines = []
    if isinstance(knee, Mapping):
        nxt = knee.get("next") or {}
        lines.append(
            f"Knee at {knee.get('kind')} {knee.get('level'):g}: {knee.get('throughput_rps')} req/s, p99 "
            f"{format_value(knee.get('p99_ms'))} ms{_ci_text(knee.get('p99_ci_ms'))}; next level "
            f"{format_value(nxt.get('level'))}: {nxt.get('throughput_rps')} req/s, p99 "
            f"{format_value(nxt.get('p99_ms'))} ms{_ci_text(nxt.get('p99_ci_ms'))} ({knee.get('rule')})."
        )
    elif points:
        lines.append("No knee: throughput kept growing with load (or too few levels to tell).")
    onset = metrics.get("error_onset")
    if isinstance(onset, Mapping):
        lines.append(
            f"Errors start at {onset.get('label')}: {100 * float(onset.get('error_rate') or 0):.1f}% failed "
            f"({_errors_text(onset.get('errors') or {})})."
        )
    slo = metrics.get("slo")
    if isinstance(slo, Mapping):
        best = slo.get("max_rate_rps")
        lines.append(
            f"SLO {slo.get('text')}: highest rate that met it {best:g} req/s."
            if best is not None
            else f"SLO {slo.get('text')}: no tested rate met it."
        )
    if lines:
        out.append(Section("Capacity", lines=lines))
    open_rows = [
        (
            p.get("label"),
            _get(p.get("latency_ms"), "p50"),
            _get(p.get("latency_from_send_ms"), "p50"),
            _get(p.get("latency_ms"), "p99"),
            _get(p.get("latency_from_send_ms"), "p99"),
            _get(p.get("pacer_lag_ms"), "p99"),
            p.get("unsent"),
        )
        for p in points
        if p.get("latency_from_send_ms")
    ]
    if open_rows:
        out.append(
            Section(
                "Coordinated omission",
                tables=[
                    Table(
                        (
                            "point",
                            "p50 intended",
                            "p50 from send",
                            "p99 intended",
                            "p99 from send",
                            "pacer lag p99",
                            "unsent",
                        ),
                        open_rows,
                    )
                ],
                lines=[
                    "'intended' counts from the scheduled send time (what users see); 'from send' hides the "
                    "time requests waited for a connection."
                ],
            )
        )
    stage_rows = []
    for p in points:
        for name, summary in (p.get("server_timing_ms") or {}).items():
            stage_rows.append((p.get("label"), name, summary.get("p50"), summary.get("p99"), summary.get("count")))
        network = p.get("network_queue_ms")
        if isinstance(network, Mapping):
            stage_rows.append(
                (
                    p.get("label"),
                    "client - server total (network/queue)",
                    network.get("p50"),
                    network.get("p99"),
                    network.get("count"),
                )
            )
    if stage_rows:
        out.append(
            Section("Server-side stages (ms)", tables=[Table(("point", "stage", "p50", "p99", "n"), stage_rows)])
        )
    stream_rows = []
    for p in points:
        stream = p.get("stream")
        if not isinstance(stream, Mapping):
            continue
        ttft, itl = stream.get("ttft_ms") or {}, stream.get("itl_ms") or {}
        ttft_send = stream.get("ttft_from_send_ms") or {}
        stream_rows.append(
            (
                p.get("label"),
                ttft.get("p50"),
                ttft.get("p99"),
                ttft_send.get("p99"),
                itl.get("p50"),
                itl.get("p99"),
                stream.get("output_tokens"),
                stream.get("output_tokens_per_s"),
            )
        )
    if stream_rows:
        columns = ("point", "TTFT p50", "TTFT p99", "TTFT p99 from send", "ITL p50", "ITL p99", "tokens", "tokens/s")
        out.append(
            Section(
                "Streaming",
                tables=[Table(columns, stream_rows)],
                lines=[
                    "TTFT counts from the intended send time (open loop) or the issue time (closed loop); "
                    "'from send' is the uncorrected open-loop value."
                ],
            )
        )
    calibration = metrics.get("calibration")
    if isinstance(calibration, Mapping):
        out.append(
            Section(
                "Generator calibration",
                lines=[
                    f"Against the built-in null server at concurrency {calibration.get('concurrency')}: "
                    f"{calibration.get('throughput_rps')} req/s with the event loop at "
                    f"{calibration.get('client_cpu_fraction')} of a core (parser: {calibration.get('parser')}, "
                    f"loop: {calibration.get('event_loop')})."
                ],
            )
        )
    return out


def _ci_text(interval: Any) -> str:
    """`` (95% CI 9.5-10.6)`` for a [low, high] pair, else nothing."""
    if isinstance(interval, (list, tuple)) and len(interval) == 2:
        return f" (95% CI {format_value(interval[0])}-{format_value(interval[1])})"
    return ""
