"""Human sections of a route result, built from ``metrics`` alone (every renderer shows them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from infradoctor.report.sections import Cell, Section, Table, format_value
from infradoctor.result import Result


def _ci(entry: Any) -> str:
    if not isinstance(entry, Mapping) or entry.get("value") is None:
        return "–"
    value, low, high = entry.get("value"), entry.get("ci_low"), entry.get("ci_high")
    text = format_value(value)
    if low is not None and high is not None:
        text += f" [{format_value(low)}, {format_value(high)}]"
    return text


def _short(url: Any) -> str:
    """``host:port`` of a backend URL (tables stay narrow); anything else as is."""
    text = str(url)
    netloc = urlsplit(text).netloc if "://" in text else ""
    return netloc or text


def _health(health: Any) -> str:
    if not isinstance(health, Mapping) or not health:
        return "–"
    return f"{health.get('status') or 'no answer'} {urlsplit(str(health.get('url', ''))).path}"


def _errors(errors: Any) -> str:
    if not isinstance(errors, Mapping) or not errors:
        return "0"
    return ", ".join(f"{k} {v}" for k, v in errors.items())


def sections(result: Result) -> list[Section]:
    """Paths, attribution, backends, network."""
    metrics = result.metrics
    out: list[Section] = []
    paths: Sequence[Mapping[str, Any]] = metrics.get("paths") or []
    if paths:
        rows = [
            (
                _short(p.get("name")),
                p.get("kind"),
                p.get("requests"),
                _errors(p.get("errors")),
                _ci(p.get("p50_ms")),
                _ci(p.get("p90_ms")),
                _ci(p.get("p99_ms")),
            )
            for p in paths
        ]
        out.append(
            Section(
                "Paths (interleaved)",
                tables=(
                    Table(("path", "kind", "requests", "errors", "p50 ms [95% CI]", "p90 ms", "p99 ms [95% CI]"), rows),
                ),
            )
        )
    att = metrics.get("attribution") or {}
    if att:
        lines = [
            f"Router adds {_ci(att.get('added_p50_ms'))} ms at p50 and {_ci(att.get('added_p99_ms'))} ms at p99 "
            f"(routed minus direct, 95% bootstrap CI; Mann-Whitney p={format_value(att.get('p_value'))}).",
            f"Routed p50 {format_value(att.get('routed_p50_ms'))} ms vs direct {format_value(att.get('direct_p50_ms'))}"
            f" ms; p99 {format_value(att.get('routed_p99_ms'))} vs {format_value(att.get('direct_p99_ms'))} ms.",
        ]
        per = att.get("per_backend") or []
        tables: tuple[Table, ...] = ()
        if per:
            tables = (
                Table(
                    ("backend", "routed n", "direct n", "added p50 ms [95% CI]"),
                    [
                        (_short(b.get("backend")), b.get("routed_n"), b.get("direct_n"), _ci(b.get("added_p50_ms")))
                        for b in per
                    ],
                ),
            )
        out.append(Section("Router or backend?", tables=tables, lines=lines))
    backends: Sequence[Mapping[str, Any]] = metrics.get("backends") or []
    if backends:
        backend_rows: list[tuple[Cell, ...]] = []
        for b in backends:
            direct = b.get("direct") or {}
            health = b.get("health") or {}
            share = b.get("share")
            backend_rows.append(
                (
                    _short(b.get("url")),
                    "–" if share is None else f"{share:.0%}",
                    f"{(b.get('expected_share') or 0):.0%}",
                    b.get("served"),
                    f"{(direct.get('error_rate') or 0):.1%}",
                    _ci(direct.get("p50_ms")),
                    _health(health),
                )
            )
        dist = metrics.get("distribution") or {}
        lines = []
        if dist:
            header = dist.get("header") or "none found"
            lines.append(
                f"Serving backend from header: {header}; {dist.get('attributed', 0)} attributed, "
                f"{dist.get('unattributed', 0)} not; chi-square p={format_value(dist.get('p_value'))}."
            )
        out.append(
            Section(
                "Backends",
                tables=(
                    Table(
                        ("backend", "share", "expected", "served", "direct errors", "direct p50 ms", "health"),
                        backend_rows,
                    ),
                ),
                lines=lines,
            )
        )
    network = metrics.get("network") or {}
    connect = network.get("connect") or []
    lines = []
    timeouts = metrics.get("timeouts")
    if timeouts:
        attempts = timeouts.get("attempts") or 1
        per_attempt = f", {format_value(timeouts.get('per_attempt_ms'))} ms per attempt" if attempts > 1 else ""
        lines.append(
            f"{timeouts.get('count')} routed errors end at {format_value(timeouts.get('timeout_ms'))} ms "
            f"(inferred timeout{per_attempt}); slowest backend p99 {format_value(timeouts.get('backend_p99_ms'))} ms."
        )
    retries = metrics.get("retries")
    if retries:
        lines.append(
            f"Backend attempts per client request: {format_value(retries.get('amplification'))} "
            f"({retries.get('backend_attempts')} for {retries.get('client_requests')}, from {retries.get('source')})."
        )
    lines.extend(
        f"Bandwidth to {b.get('host')}: "
        + (f"{format_value(b.get('mbits_per_s'))} Mbit/s" if b.get("mbits_per_s") is not None else str(b.get("reason")))
        for b in network.get("bandwidth") or []
    )
    lines.extend(
        f"{c.get('syn_retransmits')} of {c.get('attempts')} connects to {_short(c.get('name'))} completed only after "
        f"a SYN retransmit ({', '.join(format_value(v) for v in c.get('syn_retransmit_ms') or [])} ms): dropped SYNs "
        "(full accept queue or packet loss), not failures."
        for c in connect
        if c.get("syn_retransmits")
    )
    if connect or lines:
        rows = [
            (
                _short(c.get("name")),
                c.get("address"),
                c.get("attempts"),
                _errors(c.get("failures")),
                c.get("p50_ms"),
                c.get("p99_ms"),
                c.get("requests_per_connection"),
            )
            for c in connect
        ]
        net_tables: tuple[Table, ...] = (
            (Table(("path", "address", "connects", "failures", "p50 ms", "p99 ms", "requests/conn"), rows),)
            if rows
            else ()
        )
        out.append(Section("Network", tables=net_tables, lines=lines))
    return out
