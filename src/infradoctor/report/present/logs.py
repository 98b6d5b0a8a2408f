"""Human sections of a ``logs`` result, built from ``result.metrics`` only (renderers escape the text)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infradoctor.report.sections import Cell, Section, Table
from infradoctor.result import Result

MAX_ROWS = 15
"""Rows shown per table (the JSON has everything)."""
EXAMPLE_CHARS = 160
"""Example lines are cut to this many characters."""
MAX_EXAMPLES = 5
"""Example lines shown under the incidents table (one per incident, largest first)."""


def _list(metrics: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = metrics.get(key)
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, Sequence) else []


def _short(text: Any, limit: int = EXAMPLE_CHARS) -> str:
    value = str(text or "")
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _window(start: Any, end: Any) -> str:
    """``2026-11-29 10:01:10 - 10:01:37`` from ISO times (the date once when both are on the same day)."""
    if not start:
        return "no timestamps"
    first = str(start).replace("T", " ").rstrip("Z")
    last = str(end or start).replace("T", " ").rstrip("Z")
    if last[:10] == first[:10]:
        last = last[11:]
    return first if last == first[11:] else f"{first} - {last}"


def sections(result: Result) -> list[Section]:
    """Incidents, upstreams, router split, timeline peaks, node/app errors, and files."""
    metrics = result.metrics
    out: list[Section] = []
    rows: list[tuple[Cell, ...]]
    incidents = _list(metrics, "incidents")
    if incidents:
        rows = [
            (i.get("kind"), i.get("code"), i.get("subject"), _window(i.get("start"), i.get("end")), i.get("count"),
             Path(str(i.get("file") or "")).name)
            for i in incidents[:MAX_ROWS]
        ]
        total = len(incidents) + int(metrics.get("incidents_dropped") or 0)
        examples = [
            f"{i.get('kind')} @ {i.get('subject')}: {_short(i['examples'][0])}"
            for i in incidents[:MAX_EXAMPLES] if i.get("examples")
        ]
        out.append(Section(
            "Incidents",
            tables=[Table(("kind", "code", "subject", "window (UTC)", "count", "file"), rows,
                          title=f"largest {MAX_ROWS} of {total}" if total > MAX_ROWS else "")],
            lines=examples,
        ))
    upstreams = _list(metrics, "upstreams")
    if upstreams:
        rows = [
            (
                u.get("upstream"),
                u.get("requests"),
                u.get("errors"),
                u.get("error_rate"),
                u.get("p50_ms"),
                u.get("p99_ms"),
            )
            for u in upstreams[:MAX_ROWS]
        ]
        out.append(
            Section(
                "Upstreams", tables=[Table(("upstream", "requests", "errors", "error rate", "p50 ms", "p99 ms"), rows)]
            )
        )
    split = metrics.get("router_split")
    if isinstance(split, Mapping) and split.get("requests"):
        out.append(
            Section(
                "Router vs upstream time",
                tables=[
                    Table(
                        ("", "p50 ms", "p99 ms"),
                        [
                            ("request (router log)", split.get("request_p50_ms"), split.get("request_p99_ms")),
                            ("upstream", split.get("upstream_p50_ms"), split.get("upstream_p99_ms")),
                            ("router's own time", split.get("router_p50_ms"), split.get("router_p99_ms")),
                        ],
                        title=f"router = request minus upstream time; {split.get('requests')} single-attempt requests",
                    )
                ],
            )
        )
    timeline = metrics.get("timeline")
    if isinstance(timeline, Mapping):
        points = [p for p in timeline.get("points") or [] if isinstance(p, Mapping)]
        failing = [p for p in points if p.get("kinds")]
        if failing:
            worst = sorted(failing, key=lambda p: -sum((p.get("kinds") or {}).values()))[:10]
            rows = [
                (
                    p.get("t"),
                    p.get("total"),
                    ", ".join(f"{k} {v}" for k, v in (p.get("status") or {}).items()),
                    ", ".join(f"{k} {v}" for k, v in (p.get("kinds") or {}).items()),
                )
                for p in sorted(worst, key=lambda p: str(p.get("t")))
            ]
            out.append(
                Section(
                    "Timeline: worst buckets",
                    tables=[
                        Table(
                            ("time", "lines", "status", "failures"),
                            rows,
                            title=f"{timeline.get('bucket_s')} s buckets; all {len(points)} in metrics.timeline",
                        )
                    ],
                )
            )
    xids = _list(metrics, "xid")
    if xids:
        out.append(
            Section(
                "GPU Xid errors",
                tables=[
                    Table(
                        ("xid", "device", "count", "meaning", "action"),
                        [
                            (x.get("code"), x.get("device"), x.get("count"), x.get("meaning"), x.get("action"))
                            for x in xids
                        ],
                    )
                ],
            )
        )
    exceptions = metrics.get("exceptions")
    if isinstance(exceptions, Mapping) and exceptions:
        out.append(
            Section(
                "Python exceptions", tables=[Table(("exception", "tracebacks"), list(exceptions.items())[:MAX_ROWS])]
            )
        )
    files = _list(metrics, "files")
    if files:
        rows = [
            (
                f.get("file"),
                f.get("error") or f.get("format"),
                f.get("engine"),
                f.get("lines"),
                f.get("parsed"),
                ", ".join(f"{k} {v}" for k, v in (f.get("skipped") or {}).items()),
            )
            for f in files[:50]
        ]
        out.append(Section("Files", tables=[Table(("file", "format", "engine", "lines", "parsed", "skipped"), rows)]))
    return out
