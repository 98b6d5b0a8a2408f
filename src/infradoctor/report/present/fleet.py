"""Human sections of a fleet result: the fleet table (instance x health), coverage, onset, routers, servers.

:func:`timeline_chart` draws the worst series over the window (with the fleet's median) as inline SVG for the
HTML write-up.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from infradoctor.fleet.metrics import FleetMetrics, NodeHealth
from infradoctor.report.sections import Section, Table
from infradoctor.report.svg import Series, line_chart
from infradoctor.result import Result

TABLE_ROWS = 25
"""Nodes shown in the fleet table (worst first); the rest are counted."""
_SHORT = {"dcgm-exporter": "dcgm", "node_exporter": "node"}


def _pct(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def fleet_table(nodes: Sequence[NodeHealth], limit: int = TABLE_ROWS) -> Table:
    """The worst nodes first: health, codes, and the numbers behind them."""
    rows = []
    for n in nodes[:limit]:
        rows.append((n.node, n.health, ",".join(n.codes) or "-", n.gpus, _pct(n.gpu_util_mean_pct),
                     _pct(n.gpu_temp_max_c),
                     _pct(100 * n.throttled_share_max) if n.throttled_share_max is not None else None,
                     ",".join(str(x) for x in n.xid) or "-", _pct(n.cpu_util_pct), _pct(n.mem_available_pct),
                     _pct(n.disk_used_max_pct), ",".join(_SHORT.get(a, a) for a in n.absent) or "-"))
    title = ("Fleet, worst first (util% GPU mean, temp C hottest GPU, thr% most throttled GPU's share of the window, "
             "mem% least RAM available, absent: exporters without series)")
    if len(nodes) > limit:
        title += f": {limit} of {len(nodes)} nodes shown"
    return Table(columns=("node", "health", "codes", "gpus", "util%", "temp C", "thr%", "xid", "cpu%", "mem%",
                          "disk%", "absent"), rows=rows, title=title)


def sections(result: Result) -> list[Section]:
    """The fleet table, what each exporter covered, the onset, routers, model servers and containers."""
    metrics = FleetMetrics.from_dict(result.metrics)
    head = metrics.headline
    health = Counter(n.health for n in metrics.nodes)
    lines = [f"Window {metrics.window.start} .. {metrics.window.end} (step {metrics.window.step_s:g} s); "
             f"{head.nodes} nodes, {head.gpus} GPUs; " + ", ".join(f"{count} {name}" for name, count in
                                                                  sorted(health.items())),
             f"Prometheus {metrics.prometheus.url}" + (f" {metrics.prometheus.version}" if metrics.prometheus.version
                                                       else "") + f": {head.queries} queries, "
             f"{head.bytes_fetched / 1e6:.2f} MB fetched in {head.query_seconds:.1f} s"]
    if not metrics.prometheus.reachable:
        lines.append("Prometheus could not be reached: nothing is known about the fleet (not healthy)")
    tables = [fleet_table(metrics.nodes)] if metrics.nodes else []
    if metrics.coverage:
        tables.append(Table(columns=("source", "nodes with series", "expected", "missing"),
                            rows=[(c.source, c.nodes_seen, c.nodes_expected,
                                   "query failed" if c.failed else (", ".join(c.missing[:6]) +
                                                                    (" ..." if len(c.missing) > 6 else "")) or "-")
                                  for c in metrics.coverage],
                            title="Evidence coverage (absent is not healthy)"))
    out = [Section(title="Fleet", tables=tables, lines=lines)]
    if metrics.onsets:
        rows = [(o.first_bad or "-", o.entity, o.code, o.signal, "yes" if o.before_window else "")
                for o in metrics.onsets[:12]]
        change_lines = [f"change {c.at}: {c.description}" + (f" ({c.node})" if c.node else "")
                        for c in metrics.changes[:10]]
        out.append(Section(title="Onset", tables=[Table(columns=("first bad", "entity", "code", "signal",
                                                                 "before window"), rows=rows)],
                           lines=change_lines))
    if metrics.routers:
        out.append(Section(title="Routers", tables=[Table(
            columns=("node", "router", "upstream", "requests", "5xx", "retries", "pending max", "healthy min",
                     "members"),
            rows=[(r.node, r.router, r.upstream, r.requests, r.errors_5xx, r.retries, r.pending_max, r.healthy_min,
                   r.members_max) for r in metrics.routers[:20]])]))
    if metrics.servers:
        out.append(Section(title="Model servers", tables=[Table(
            columns=("node", "server", "model", "queue max", "queue mean", "running", "kv cache max", "preemptions",
                     "p50 s"),
            rows=[(s.node, s.server, s.model, s.queue_max, s.queue_mean, s.running_mean, s.kv_cache_max,
                   s.preemptions, s.e2e_p50_s) for s in metrics.servers[:20]])]))
    if metrics.containers is not None:
        c = metrics.containers
        text = [f"{c.restarts:g} container restarts ({c.containers_restarted} containers) in the window"]
        for label, names in (("OOMKilled", c.oom_killed), ("crash-looping", c.crash_looping),
                             ("not ready", c.not_ready), ("pending GPU pods", c.pending_gpu_pods)):
            if names:
                text.append(f"{label}: " + ", ".join(names[:8]) + (" ..." if len(names) > 8 else ""))
        out.append(Section(title="Kubernetes", lines=text))
    if metrics.alert_rules:
        out.append(Section(title="Alert rules", lines=[f"written to {metrics.alert_rules}"]))
    return out


def timeline_chart(result: Result) -> str:
    """The worst series of the window and the fleet's median as an inline SVG line chart ('' when none)."""
    if result.command != "fleet":
        return ""
    metrics = FleetMetrics.from_dict(result.metrics)
    if not metrics.timeline:
        return ""
    signal = metrics.timeline[0].signal
    series = [Series(t.name, [(x / 60.0, y) for x, y in t.points], dashed=t.name.startswith("fleet median"))
              for t in metrics.timeline if t.signal == signal]
    return line_chart(f"Worst series: {signal}", series[:8], x_label=f"minutes from {metrics.window.start}",
                      y_label=signal)
