"""Human sections of a ``logs`` result, built from its typed metrics (renderers escape the text)."""

from __future__ import annotations

from pathlib import Path

from infradoctor.logs.metrics import LogsMetrics
from infradoctor.report.sections import Cell, Section, Table
from infradoctor.result import Result

MAX_ROWS = 15
"""Rows shown per table (the JSON has everything)."""
EXAMPLE_CHARS = 160
"""Example lines are cut to this many characters."""
MAX_EXAMPLES = 5
"""Example lines shown under the incidents table (one per incident, largest first)."""


def _short(text: str, limit: int = EXAMPLE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _window(start: str | None, end: str | None) -> str:
    """``2026-11-29 10:01:10 - 10:01:37`` from ISO times (the date once when both are on the same day)."""
    if not start:
        return "no timestamps"
    first = start.replace("T", " ").rstrip("Z")
    last = (end or start).replace("T", " ").rstrip("Z")
    if last[:10] == first[:10]:
        last = last[11:]
    return first if last == first[11:] else f"{first} - {last}"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def sections(result: Result) -> list[Section]:
    """Incidents, upstreams, router split, flags, timeline peaks, node/app errors, and files."""
    metrics = LogsMetrics.from_dict(result.metrics)
    out: list[Section] = []
    rows: list[tuple[Cell, ...]]
    if metrics.incidents:
        rows = [(i.kind, i.code, i.subject, _window(i.start, i.end), i.failures, i.count,
                 ", ".join(Path(f).name for f in (i.files or (i.file,))))
                for i in metrics.incidents[:MAX_ROWS]]
        total = len(metrics.incidents) + metrics.incidents_dropped
        examples = [f"{i.kind} @ {i.subject}: {_short(i.examples[0])}"
                    for i in metrics.incidents[:MAX_EXAMPLES] if i.examples]
        out.append(Section(
            "Incidents",
            tables=[Table(("kind", "code", "subject", "window (UTC)", "failures", "lines", "files"), rows,
                          title=f"largest {MAX_ROWS} of {total}" if total > MAX_ROWS else "")],
            lines=examples,
        ))
    if metrics.upstreams:
        rows = [(u.upstream, u.requests, u.errors, u.error_rate, u.p50_ms, u.p99_ms, u.timed)
                for u in metrics.upstreams[:MAX_ROWS]]
        out.append(Section("Upstreams", tables=[Table(
            ("upstream", "requests", "errors", "error rate", "p50 ms", "p99 ms", "n timed"), rows)]))
    split = metrics.router_split
    head = metrics.headline
    if split.requests or head.request_latency_n:
        out.append(Section("Router vs upstream time", tables=[Table(
            ("", "p50 ms", "p99 ms", "n"),
            [
                ("request (router log)", split.request_p50_ms, split.request_p99_ms, split.request_n),
                ("upstream", split.upstream_p50_ms, split.upstream_p99_ms, split.upstream_n),
                ("router's own time", split.router_p50_ms, split.router_p99_ms, split.requests),
            ],
            title=f"request percentiles over {head.request_population or 'timed requests'}; router = request minus "
                  "upstream time of single-attempt requests",
        )]))
    if metrics.envoy_flags or metrics.haproxy_states:
        tables = []
        if metrics.envoy_flags:
            tables.append(Table(("Envoy flag", "requests"), list(metrics.envoy_flags.items())[:MAX_ROWS]))
        if metrics.haproxy_states:
            tables.append(Table(("HAProxy termination", "requests"), list(metrics.haproxy_states.items())[:MAX_ROWS]))
        out.append(Section("Response flags and termination states", tables=tables))
    failing = [p for p in metrics.timeline.points if p.kinds]
    if failing:
        worst = sorted(failing, key=lambda p: -sum(p.kinds.values()))[:10]
        rows = [(p.t, p.total, _counts(p.status), _counts(p.kinds)) for p in sorted(worst, key=lambda p: str(p.t))]
        out.append(Section("Timeline: worst buckets", tables=[Table(
            ("time", "lines", "status", "failures"), rows,
            title=f"{metrics.timeline.bucket_s} s buckets; all {len(metrics.timeline.points)} in metrics.timeline")]))
    if metrics.xid:
        out.append(Section("GPU Xid errors", tables=[Table(
            ("xid", "device", "count", "meaning", "action", "caused by"),
            [(x.code, x.device, x.count, x.meaning, x.action, x.caused_by) for x in metrics.xid])]))
    if metrics.exceptions:
        out.append(Section("Python exceptions", tables=[Table(
            ("exception", "tracebacks"), list(metrics.exceptions.items())[:MAX_ROWS])]))
    if metrics.files:
        rows = [(f.file, f.error or f.format, f.engine, f.lines, f.parsed, _counts(f.formats), _counts(f.envelopes),
                 _counts(f.skipped)) for f in metrics.files[:50]]
        out.append(Section("Files", tables=[Table(
            ("file", "format", "engine", "lines", "parsed", "formats", "envelopes", "skipped"), rows)]))
    return out
