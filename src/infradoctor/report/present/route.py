"""Human sections of a route result, built from its typed metrics (every renderer shows them)."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import SplitResult, urlsplit

from infradoctor.metrics import MetricsError
from infradoctor.report.sections import Cell, Section, Table, format_p_value, format_value
from infradoctor.result import Result
from infradoctor.route.metrics import EstimateMetrics, HealthMetrics, NetworkMetrics, RouteMetrics
from infradoctor.telemetry.evidence import RouterWindow, ServerPoint

ROUTER_COUNTERS = ("requests", "retries", "retry_success", "retry_overflow", "retry_backoff", "pending_total",
                   "pending_overflow", "none_healthy", "connect_fail", "panic", "membership_change",
                   "responses_5xx", "server_responses_5xx", "client_requests", "accepts", "handled")
"""Router counters shown (when the router reports them and they grew)."""


def _ci(entry: EstimateMetrics) -> str:
    if entry.value is None:
        return "–"
    text = format_value(entry.value)
    if entry.ci_low is not None and entry.ci_high is not None:
        text += f" [{format_value(entry.ci_low)}, {format_value(entry.ci_high)}]"
    return text


def _split(url: str) -> SplitResult | None:
    """The parts of a URL, or None when it does not parse (``http://[x``): a stored URL is shown, never fatal."""
    try:
        return urlsplit(url) if "://" in url else None
    except ValueError:
        return None


def _short(url: str) -> str:
    """``host:port`` of a backend URL (tables stay narrow; no user information); anything else as is."""
    parts = _split(url)
    netloc = parts.netloc.rpartition("@")[2] if parts is not None else ""
    return netloc or url


def _health(health: HealthMetrics | None) -> str:
    if health is None:
        return "–"
    parts = _split(health.url)
    return f"{health.status or 'no answer'} {parts.path if parts is not None else health.url}"


def _errors(errors: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in errors.items()) if errors else "0"


def sections(result: Result) -> list[Section]:
    """Paths, attribution, backends, network, the router's and servers' own statistics."""
    if not result.metrics:
        return []
    try:
        metrics = RouteMetrics.from_dict(result.metrics)
    except MetricsError as exc:
        return [Section("Route", lines=(f"metrics could not be read: {exc}",))]
    out: list[Section] = []
    if metrics.paths:
        rows = [(_short(p.name), p.kind, p.requests, _errors(p.errors), _ci(p.p50_ms), _ci(p.p90_ms), _ci(p.p99_ms))
                for p in metrics.paths]
        out.append(Section("Paths (interleaved)", tables=(
            Table(("path", "kind", "requests", "errors", "p50 ms [95% CI]", "p90 ms", "p99 ms [95% CI]"), rows),)))
    att = metrics.attribution
    if att.routed_n or att.direct_n:
        lines = [
            f"Router adds {_ci(att.added_p50_ms)} ms at p50 and {_ci(att.added_p99_ms)} ms at p99 "
            f"(routed minus direct, 95% bootstrap CI; Mann-Whitney {format_p_value(att.p_value)}).",
            f"Routed p50 {format_value(att.routed_p50_ms)} ms vs direct {format_value(att.direct_p50_ms)}"
            f" ms; p99 {format_value(att.routed_p99_ms)} vs {format_value(att.direct_p99_ms)} ms.",
        ]
        tables: tuple[Table, ...] = ()
        if att.per_backend:
            tables = (Table(("backend", "routed n", "direct n", "added p50 ms [95% CI]"),
                            [(_short(b.backend), b.routed_n, b.direct_n, _ci(b.added_p50_ms))
                             for b in att.per_backend]),)
        out.append(Section("Router or backend?", tables=tables, lines=lines))
    if metrics.backends:
        backend_rows: list[tuple[Cell, ...]] = [
            (_short(b.url), "–" if b.share is None else f"{b.share:.0%}", f"{b.expected_share:.0%}", b.served,
             f"{b.direct.error_rate:.1%}", _ci(b.direct.p50_ms), _health(b.health))
            for b in metrics.backends
        ]
        dist = metrics.distribution
        lines = [f"Serving backend from header: {dist.header or 'none found'}; {dist.attributed} attributed, "
                 f"{dist.unattributed} not; chi-square {format_p_value(dist.p_value)}."]
        out.append(Section("Backends", tables=(
            Table(("backend", "share", "expected", "served", "direct errors", "direct p50 ms", "health"),
                  backend_rows),), lines=lines))
    network = _network(metrics)
    if network is not None:
        out.append(network)
    if metrics.router_stats is not None:
        out.append(router_section(metrics.router_stats))
    if metrics.servers:
        out.append(servers_section(metrics.servers))
    return out


def _network(metrics: RouteMetrics) -> Section | None:
    network: NetworkMetrics = metrics.network
    lines = []
    timeouts = metrics.timeouts
    if timeouts is not None:
        per_attempt = f", {format_value(timeouts.per_attempt_ms)} ms per attempt" if timeouts.attempts > 1 else ""
        lines.append(f"{timeouts.count} routed errors end at {format_value(timeouts.timeout_ms)} ms "
                     f"(inferred timeout{per_attempt}); slowest backend p99 "
                     f"{format_value(timeouts.backend_p99_ms)} ms.")
    retries = metrics.retries
    if retries is not None:
        lines.append(f"Backend attempts per client request: {format_value(retries.amplification)} "
                     f"({retries.backend_attempts} for {retries.client_requests}, from {retries.source}).")
    lines.extend(f"Bandwidth to {b.host}: " + (f"{format_value(b.mbits_per_s)} Mbit/s" if b.mbits_per_s is not None
                                               else str(b.reason)) for b in network.bandwidth)
    lines.extend(
        f"{c.syn_retransmits} of {c.attempts} connects to {_short(c.name)} completed only after a SYN retransmit "
        f"({', '.join(format_value(v) for v in c.syn_retransmit_ms)} ms): dropped SYNs (full accept queue or "
        "packet loss), not failures."
        for c in network.connect if c.syn_retransmits
    )
    if network.wakeup_delay_mean_ms is not None and network.wakeup_delay_mean_ms >= 0.5:
        lines.append(f"The prober woke {format_value(network.wakeup_delay_mean_ms)} ms late on average from 5 ms "
                     f"sleeps (p99 {format_value(network.wakeup_delay_p99_ms)} ms): the host is short of CPU.")
    if not network.connect and not lines:
        return None
    rows = [(_short(c.name), c.address, c.attempts, _errors(c.failures), c.p50_ms, c.p99_ms,
             c.requests_per_connection) for c in network.connect]
    tables = (Table(("path", "address", "connects", "failures", "p50 ms", "p99 ms", "requests/conn"), rows),) \
        if rows else ()
    return Section("Network", tables=tables, lines=lines)


def router_section(window: RouterWindow) -> Section:
    """The router's own statistics over the run: what it counted, its queues, its hosts."""
    lines = [f"{window.kind} at {window.source} ({window.format}), {window.reads} reads"
             + (f", {window.failed_reads} failed" if window.failed_reads else "") + "."]
    counted = [f"{k.replace('_', ' ')} {format_value(window.counters[k])}" for k in ROUTER_COUNTERS
               if window.counters.get(k)]
    if counted:
        lines.append("Counted during the run: " + ", ".join(counted) + ".")
    peaks = [f"{k.replace('_', ' ')} max {format_value(g.max)}" for k, g in window.gauges.items() if g.max]
    if peaks:
        lines.append("Gauges: " + ", ".join(peaks) + ".")
    if window.limits:
        lines.append("Limits: " + ", ".join(f"{k} {format_value(v)}" for k, v in window.limits.items()) + ".")
    lines.extend(f"Change: {c}" for c in window.host_changes[:10])
    lines.extend(f"Problem: {p}" for p in window.problems[:3])
    tables: tuple[Table, ...] = ()
    if window.hosts:
        rows: list[tuple[Cell, ...]] = [
            (h.name, h.address or "–", h.group, window.worst_states.get(f"{h.group}/{h.name}", h.state), h.flags,
             ", ".join(f"{k} {format_value(v)}" for k, v in list(h.counters.items())[:6] if v))
            for h in window.hosts[:50]
        ]
        tables = (Table(("host", "address", "group", "worst state", "router's flags", "counted"), rows),)
    return Section("Router statistics", tables=tables, lines=lines)


def servers_section(points: tuple[ServerPoint, ...]) -> Section:
    """Model servers' own state beside the client's latency, point by point."""
    rows: list[tuple[Cell, ...]] = []
    for p in points:
        s = p.server
        kv = "–" if s.kv_cache_usage_max is None else f"{s.kv_cache_usage_max:.0%}"
        rows.append((_short(s.source), s.kind, p.label, format_value(p.latency_p99_ms), format_value(s.waiting_max),
                     format_value(s.running_max), kv,
                     format_value(s.preemptions), format_value(s.queue_time_ms),
                     format_value(s.batch_size_mean)))
    return Section("Model servers", tables=(Table(
        ("server", "kind", "point", "client p99 ms", "waiting max", "running max", "KV cache max", "preemptions",
         "server queue ms", "batch"), rows),))
