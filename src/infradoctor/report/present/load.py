"""Human sections of a ``load`` result, read from its typed metrics (every renderer shows them).

Cells are formatted here, once, with :func:`~infradoctor.report.sections.format_value` (the same function the
CLI's per-point line uses through :func:`point_line`), so the table, the line and the headline show one value for
one metric. The points table stays readable at 80 columns: the columns that can be empty (flags) appear only when
some point has one, and failures get their own table only when there are any.
"""

from __future__ import annotations

from collections.abc import Mapping

from infradoctor.load.metrics import KneeMetrics, LatencySummary, LoadMetrics, PointMetrics
from infradoctor.load.sweep import SLO_MIN_ACHIEVED
from infradoctor.report.sections import Cell, Section, Table, format_value
from infradoctor.result import Result


def sections(result: Result) -> list[Section]:
    """Points, failures, capacity (knee, onset, SLO), coordinated omission, server stages, streaming, calibration."""
    metrics = LoadMetrics.from_dict(result.metrics)
    builders = (points_section, errors_section, capacity_section, open_loop_section, stages_section,
                streaming_section, calibration_section)
    return [section for build in builders if (section := build(metrics)) is not None]


# ---------------------------------------------------------------------------------------------------- formatting
def _ms(value: float | None) -> str:
    return format_value(value)


def _pct(rate: float) -> str:
    """A share as a percentage: ``0%``, ``0.53%``, ``12.5%``, ``100%``."""
    pct = 100.0 * rate
    if pct == 0 or pct == 100:
        return f"{pct:.0f}%"
    return f"{pct:.2f}%" if pct < 10 else f"{pct:.1f}%"


def _ci(interval: tuple[float, float] | None) -> str:
    return f"{format_value(interval[0])}–{format_value(interval[1])}" if interval is not None else "–"


def _top(errors: Mapping[str, int], limit: int = 3) -> str:
    ordered = sorted(errors.items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{name} {format_value(count)}" for name, count in ordered[:limit])
    return text + (f", +{len(ordered) - limit} more" if len(ordered) > limit else "")


def _flags(point: PointMetrics, knee_label: str | None) -> list[str]:
    flags = []
    if point.label == knee_label:
        flags.append("knee")
    if point.saturated:
        flags.append("client saturated")
    if point.unreachable:
        flags.append("unreachable")
    if point.interrupted:
        flags.append("interrupted")
    return flags


def _done_rps(point: PointMetrics) -> float:
    """Completed requests per second (runs recorded before it was measured: the successful ones)."""
    return point.completed_rps if point.completed_rps is not None else point.throughput_rps


def _knee_label(metrics: LoadMetrics) -> str | None:
    knee = metrics.knee
    if knee is None:
        return None
    return f"c={knee.level:g}" if knee.kind == "concurrency" else f"r={knee.level:g}"


def point_line(point: PointMetrics) -> str:
    """One finished point in a line: ``c=8  122 ok/s  p50 30.2 ms  p99 45.5 ms (n=248)  errors 0%``."""
    lat = point.latency_ms
    text = (f"{point.label:>8}  {format_value(point.throughput_rps)} ok/s  p50 {_ms(lat.p50)} ms  "
            f"p99 {_ms(lat.p99)} ms (n={format_value(lat.count)})  errors {_pct(point.error_rate)}")
    if point.errors:
        text += f" ({_top(point.errors, 2)})"
    flags = _flags(point, None)
    return text + (f" [{', '.join(flags)}]" if flags else "")


# ---------------------------------------------------------------------------------------------------- sections
def points_section(metrics: LoadMetrics) -> Section | None:
    """One row per point: throughput, n, p50, p99 with its interval, max, errors (and flags when any)."""
    if not metrics.points:
        return None
    knee_label = _knee_label(metrics)
    flags = {p.label: _flags(p, knee_label) for p in metrics.points}
    columns: list[str] = ["point", "ok/s", "n", "p50", "p99", "p99 95% CI", "max", "errors"]
    show_flags = any(flags.values())
    if show_flags:
        columns.append("flags")
    rows: list[list[Cell]] = []
    for p in metrics.points:
        lat = p.latency_ms
        row: list[Cell] = [p.label, p.throughput_rps, lat.count, lat.p50, lat.p99, _ci(lat.p99_ci), lat.max,
                           _pct(p.error_rate)]
        if show_flags:
            row.append(", ".join(flags[p.label]))
        rows.append(row)
    title = ("successful responses, ms from issue time (closed loop)" if metrics.mode == "closed"
             else "successful responses, ms from intended send (open loop)")
    lines = []
    if metrics.stop_reason:
        lines.append(f"sweep ended: {metrics.stop_reason}")
    cpu = [p.client_cpu_fraction for p in metrics.points if p.client_cpu_fraction is not None]
    if cpu:
        busy = _pct(min(cpu)) if min(cpu) == max(cpu) else f"{_pct(min(cpu))}–{_pct(max(cpu))}"
        lines.append(f"generator event loop busy {busy} of a core (points at 85% and more are flagged client "
                     "saturated and left out of the verdicts)")
    return Section("Load points", tables=[Table(columns=columns, rows=rows, title=title)], lines=lines)


def errors_section(metrics: LoadMetrics) -> Section | None:
    """Failures by class per point, with how long they took to fail (only when there are failures)."""
    failing = [p for p in metrics.points if p.errors]
    if not failing:
        return None
    rows: list[list[Cell]] = []
    for p in failing:
        took = p.error_latency_ms or LatencySummary()
        rows.append([p.label, sum(p.errors.values()), _pct(p.error_rate), _top(p.errors), took.p50])
    return Section("Failures", tables=[Table(("point", "failed", "share", "classes", "p50 ms to fail"), rows)],
                   lines=["Failures are counted apart: latency percentiles above are of successful responses."])


def capacity_section(metrics: LoadMetrics) -> Section | None:
    """The knee (or why there is none), the error onset, the SLO search, and what the headline describes."""
    if not metrics.points:
        return None
    lines = [_knee_text(metrics.knee) if metrics.knee is not None else _no_knee_text(metrics)]
    onset = metrics.error_onset
    if onset is not None:
        lines.append(f"Errors start at {onset.label}: {_pct(onset.error_rate)} failed ({_top(onset.errors)}).")
    slo = metrics.slo
    if slo is not None:
        if slo.max_concurrency is not None:
            lines.append(f"SLO {slo.text}: highest concurrency that met it {slo.max_concurrency} "
                         f"({format_value(slo.max_rate_rps)} req/s).")
        elif slo.max_rate_rps is not None:
            lines.append(f"SLO {slo.text}: highest rate that met it {format_value(slo.max_rate_rps)} req/s.")
        else:
            lines.append(f"SLO {slo.text}: no tested {'concurrency' if metrics.mode == 'closed' else 'rate'} "
                         "met it.")
    ref = next((p for p in metrics.points if p.label == metrics.reference_point), None)
    if ref is not None:
        why = "the knee" if metrics.knee is not None else "the highest load the generator was not saturated at"
        lines.append(f"The headline describes {ref.label} ({why}): percentiles of "
                     f"{format_value(ref.latency_ms.count)} successful responses.")
    return Section("Capacity", lines=lines)


def _knee_text(knee: KneeMetrics) -> str:
    nxt = knee.next
    return (f"Knee at {knee.kind} {knee.level:g}: {format_value(knee.throughput_rps)} req/s, p99 "
            f"{_ms(knee.p99_ms)} ms (n={format_value(knee.p99_n)}{_ci_words(knee.p99_ci_ms)}); next level "
            f"{nxt.level:g}: {format_value(nxt.throughput_rps)} req/s, p99 {_ms(nxt.p99_ms)} ms "
            f"(n={format_value(nxt.p99_n)}{_ci_words(nxt.p99_ci_ms)}). Rule: {knee.rule}.")


def _ci_words(interval: tuple[float, float] | None) -> str:
    return f", 95% CI {_ci(interval)}" if interval is not None else ""


def _no_knee_text(metrics: LoadMetrics) -> str:
    """Why no knee was reported, in the words that fit what the points show."""
    valid = sorted((p for p in metrics.points if not p.saturated and not p.interrupted and p.completed),
                   key=lambda p: p.offered)
    unreachable = [p for p in metrics.points if p.unreachable]
    if unreachable:
        p = unreachable[0]
        return (f"No knee: nothing connected to {metrics.settings.url} ({_top(p.errors)}); the sweep was given up "
                f"after {format_value(p.elapsed_s)} s.")
    if metrics.mode == "open":
        behind = [p for p in valid if p.offered > 0 and _done_rps(p) < SLO_MIN_ACHIEVED * p.offered]
        if behind:
            p = behind[0]
            return (f"No knee found, but the server did not keep up: at {p.label} it completed "
                    f"{format_value(_done_rps(p))} of {p.offered:g} req/s offered, so its capacity lies below "
                    f"that rate (run rates between the last one it kept up with and {p.offered:g}).")
    if len(valid) < 2:
        return "No knee: too few levels to tell (run more load levels)."
    rates = [p.throughput_rps for p in valid]
    if all(b > a for a, b in zip(rates, rates[1:], strict=False)):
        return (f"No knee: throughput kept growing with load ({format_value(rates[0])} -> "
                f"{format_value(rates[-1])} req/s from {valid[0].label} to {valid[-1].label}); try higher levels.")
    return ("No knee by the definition (a level gaining < 10% throughput while p99 grows > 50%): throughput "
            f"stopped growing ({format_value(max(rates))} req/s at most) without p99 rising by half.")


def open_loop_section(metrics: LoadMetrics) -> Section | None:
    """Latency from the intended send time beside latency from the write, the pacer's lag and unsent requests."""
    rows: list[list[Cell]] = []
    for p in metrics.points:
        if p.latency_from_send_ms is None:
            continue
        lag = p.pacer_lag_ms or LatencySummary()
        rows.append([p.label, p.completed_rps, p.latency_ms.p50, p.latency_from_send_ms.p50, p.latency_ms.p99,
                     p.latency_from_send_ms.p99, lag.p99, p.unsent])
    if not rows:
        return None
    columns = ("point", "done/s", "p50 intended", "p50 from send", "p99 intended", "p99 from send", "pacer lag p99",
               "unsent")
    return Section("Coordinated omission", tables=[Table(columns, rows)], lines=[
        "'intended' counts from the scheduled send time (what users see); 'from send' hides the time requests "
        "waited for a connection; done/s counts every completed request (did the server keep up with the offer?)."
    ])


def stages_section(metrics: LoadMetrics) -> Section | None:
    """Server-side stages from Server-Timing, and the network/queue remainder."""
    rows: list[list[Cell]] = []
    for p in metrics.points:
        for name, summary in p.server_timing_ms.items():
            rows.append([p.label, name, summary.p50, summary.p99, summary.count])
        if p.network_queue_ms is not None:
            rows.append([p.label, "client - server total (network/queue)", p.network_queue_ms.p50,
                         p.network_queue_ms.p99, p.network_queue_ms.count])
    if not rows:
        return None
    return Section("Server-side stages (ms)", tables=[Table(("point", "stage", "p50", "p99", "n"), rows)])


def streaming_section(metrics: LoadMetrics) -> Section | None:
    """Time to first token, inter-token latency and tokens per second per point."""
    rows: list[list[Cell]] = []
    for p in metrics.points:
        stream = p.stream
        if stream is None:
            continue
        send = stream.ttft_from_send_ms or LatencySummary()
        rows.append([p.label, stream.ttft_ms.p50, stream.ttft_ms.p99, send.p99, stream.itl_ms.p50,
                     stream.itl_ms.p99, stream.output_tokens, stream.output_tokens_per_s])
    if not rows:
        return None
    columns = ("point", "TTFT p50", "TTFT p99", "TTFT p99 from send", "ITL p50", "ITL p99", "tokens", "tokens/s")
    return Section("Streaming (ms)", tables=[Table(columns, rows)], lines=[
        "TTFT counts from the intended send time (open loop) or the issue time (closed loop); 'from send' is the "
        "uncorrected open-loop value."
    ])


def calibration_section(metrics: LoadMetrics) -> Section | None:
    """The generator's ceiling against the null server."""
    cal = metrics.calibration
    if cal is None:
        return None
    busy = _pct(cal.client_cpu_fraction) if cal.client_cpu_fraction is not None else "an unknown share"
    return Section("Generator calibration", lines=[
        f"Against the built-in null server at concurrency {cal.concurrency}: {format_value(cal.throughput_rps)} "
        f"req/s with the event loop busy {busy} of a core (parser: {cal.parser}, loop: {cal.event_loop})."
    ])


