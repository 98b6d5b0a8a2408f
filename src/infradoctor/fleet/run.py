"""``infradoctor.fleet.run(options) -> Result``: the incident window across every node, from Prometheus."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from infradoctor.findings import Finding, rank_findings, run_rules
from infradoctor.fleet import queries as q
from infradoctor.fleet.evidence import (
    Change,
    FleetEvidence,
    FleetGpu,
    FleetHost,
    Onset,
    OnsetEvidence,
    RouterUpstream,
    SeriesLine,
    Window,
)
from infradoctor.fleet.gather import Gathered, gather
from infradoctor.fleet.metrics import (
    ChangeRow,
    ContainerSummary,
    FleetHeadline,
    FleetMetrics,
    NodeHealth,
    OnsetRow,
    PrometheusInfo,
    RouterRow,
    ServerRow,
    SourceCoverage,
    TimelineSeries,
    WindowInfo,
)
from infradoctor.fleet.node_view import memory, node_evidence, node_findings
from infradoctor.fleet.onset import follow
from infradoctor.fleet.prom import Credentials, PrometheusClient
from infradoctor.fleet.rules.n015_fleet_onset import iso
from infradoctor.fleet.service_view import service_findings
from infradoctor.node.containers import ContainerEvidence
from infradoctor.node.rules._common import NodeOptions
from infradoctor.redact import redact_url
from infradoctor.result import ErrorNote, Result, new_result, utc_now_iso

MAX_FINDINGS = 500
"""Findings kept at most (the rest are counted in an error note)."""
MAX_ROWS = 200
"""Router and server rows kept in the metrics."""
MISSING_NAMED = 50
"""Nodes named per source in the coverage."""


@dataclass(frozen=True)
class FleetOptions:
    """What ``infradoctor fleet`` is asked to do."""

    prometheus: str
    """Base URL of the Prometheus HTTP API (or Thanos, Mimir, VictoriaMetrics)."""
    window: Window
    """The incident window."""
    selector: str | None = None
    """A label selector that every query carries, e.g. ``{cluster="a"}``."""
    node_label: str = "instance"
    """Where node names come from: ``instance`` (its port removed) or a label such as ``Hostname``."""
    role_label: str | None = None
    """A label that splits peers into roles for the straggler check (e.g. ``job``)."""
    changes: tuple[Change, ...] = ()
    """Deploys and configuration changes."""
    credentials: Credentials = field(default_factory=Credentials)
    """How to authenticate (held in memory only)."""
    timeout_s: float = 30.0
    """Per-query timeout."""
    node_options: NodeOptions = field(default_factory=NodeOptions)
    """Threshold overrides of the rules."""
    problems: tuple[str, ...] = ()
    """Problems met before the run (unreadable lines of the changes file), reported as errors."""
    progress: Callable[[str], None] | None = None
    """Called with the name of each source as it is queried (the CLI's status line)."""


def _worst(findings: Sequence[Finding]) -> str:
    return max(findings, key=lambda f: f.severity.rank).severity.value if findings else "ok"


def _node_of(finding: Finding) -> str | None:
    node = finding.evidence.get("node")
    return node if isinstance(node, str) else None


def run(options: FleetOptions) -> Result:
    """Query the window, judge every node and GPU with the same rules as ``node``, find stragglers and the onset."""
    started_at = utc_now_iso()
    start = time.perf_counter()
    window = options.window
    client = PrometheusClient(options.prometheus, credentials=options.credentials, timeout_s=options.timeout_s)
    scope = q.Scope(q.selector_matchers(options.selector), window.range, f"{window.step_s:g}s",
                    options.node_label)
    errors = [ErrorNote("fleet.changes", p) for p in options.problems]
    target = {"prometheus": redact_url(client.base), "selector": options.selector or "",
              "window": {"start": iso(window.start), "end": iso(window.end), "step_s": window.step_s},
              "auth_kind": client.credentials.kind}
    info, failure = client.build_info()
    if failure is not None and failure.kind in ("unreachable", "timeout"):
        errors.append(ErrorNote("fleet.prometheus", f"{failure.kind}: {failure.message}; no evidence gathered"))
        metrics = _metrics(options, client, window, None, [], {}, [], [], [], reachable=False)
        return new_result("fleet", started_at=started_at, duration_s=time.perf_counter() - start, target=target,
                          metrics=metrics.to_dict(), errors=errors)
    gathered = gather(client, window, scope, role_label=options.role_label, progress=options.progress)
    evidence = gathered.evidence
    findings = _findings(gathered, options, evidence)
    if options.progress is not None:
        options.progress("onsets")
    problems: list[tuple[str, str]] = []
    ranked = rank_findings(findings)
    onsets, lines, by_finding = follow(client, window, scope, ranked[:MAX_FINDINGS], problems)
    ranked = [_with_onset(f, by_finding.get(i)) for i, f in enumerate(ranked)]
    onset_evidence = OnsetEvidence(window, tuple(onsets), tuple(options.changes))
    ranked = rank_findings([*ranked, *run_rules(onset_evidence, options.node_options)])
    errors += [ErrorNote(p.source, p.message) for p in gathered.problems]
    errors += [ErrorNote(source, message) for source, message in problems]
    errors += _coverage_notes(evidence, gathered)
    if len(ranked) > MAX_FINDINGS:
        errors.append(ErrorNote("fleet.findings", f"{len(ranked) - MAX_FINDINGS} more findings left out "
                                                  f"(kept the {MAX_FINDINGS} most severe)"))
        ranked = ranked[:MAX_FINDINGS]
    metrics = _metrics(options, client, window, gathered, ranked, info or {}, onsets, lines, list(options.changes))
    return new_result("fleet", started_at=started_at, duration_s=time.perf_counter() - start, target=target,
                      metrics=metrics.to_dict(), findings=ranked, errors=errors)


def _with_onset(finding: Finding, onset: Onset | None) -> Finding:
    if onset is None:
        return finding
    first = iso(onset.first_bad) if onset.first_bad is not None else None
    return replace(finding, evidence={**finding.evidence, "onset": first, "bad_before_window": onset.bad_at_start})


def _findings(gathered: Gathered, options: FleetOptions, evidence: FleetEvidence) -> list[Finding]:
    gpus_by_node: dict[str, list[FleetGpu]] = defaultdict(list)
    for gpu in evidence.gpus:
        gpus_by_node[gpu.node].append(gpu)
    hosts = {h.node: h for h in evidence.hosts}
    steps = max(1, round(evidence.window.seconds / evidence.window.step_s))
    findings: list[Finding] = []
    source = "dcgm-exporter via Prometheus"
    for node in sorted(set(gpus_by_node) | set(hosts)):
        node_ev = node_evidence(node, gpus_by_node.get(node, []), hosts.get(node), window_s=evidence.window.seconds,
                                steps=steps, source=source)
        findings.extend(node_findings(node, node_ev, options.node_options))
    if gathered.containers is not None:
        findings.extend(run_rules(gathered.containers, options.node_options))
    findings.extend(run_rules(evidence, options.node_options))
    findings.extend(service_findings(evidence.routers, evidence.servers, steps))
    return findings


def _coverage_notes(evidence: FleetEvidence, gathered: Gathered) -> list[ErrorNote]:
    notes = [ErrorNote("fleet.coverage", text) for text in gathered.notes]
    dcgm = next(c for c in evidence.coverage if c.source == "dcgm-exporter")
    node_exp = next(c for c in evidence.coverage if c.source == "node_exporter")
    for cov in (dcgm, node_exp):
        if cov.failed:
            notes.append(ErrorNote("fleet.coverage", f"{cov.source}: queries failed; its evidence is unknown "
                                                     "(not healthy)"))
            continue
        missing = cov.missing
        if missing:
            named = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
            notes.append(ErrorNote("fleet.coverage", f"no {cov.source} series for {len(missing)} of "
                                                     f"{len(cov.nodes_expected)} nodes in the window: {named}; "
                                                     "their evidence is absent, not healthy"))
        elif not cov.nodes_seen:
            notes.append(ErrorNote("fleet.coverage", f"no {cov.source} series in the window: its evidence is "
                                                     "absent, not healthy"))
    if dcgm.nodes_seen and not dcgm.failed:
        known = set(dcgm.nodes_seen) | set(dcgm.missing)
        without = [n for n in node_exp.nodes_seen if n not in known]
        if without:
            notes.append(ErrorNote("fleet.coverage", f"{len(without)} nodes have node_exporter but never had "
                                                     f"dcgm-exporter series (no GPU, or no exporter): "
                                                     + ", ".join(without[:10])))
    for group, signals in (("ECC errors", ("ecc_dbe_volatile",)), ("retired pages or row remaps",
                                                                  ("retired_dbe", "remapped_uncorrectable")),
                           ("throttle reasons", ("clock_reasons",)), ("Xid", ("xid",))):
        lacking = [g for g in evidence.gpus if not any(s in g.signals for s in signals)]
        if evidence.gpus and lacking:
            notes.append(ErrorNote("fleet.coverage", f"{group} not collected for {len(lacking)} of "
                                                     f"{len(evidence.gpus)} GPUs (absent from dcgm-exporter's "
                                                     "counters): not checked, not healthy"))
    blind = [r.node for r in evidence.routers if r.router == "nginx" and r.up_min is not None and r.up_min < 1]
    if blind:
        notes.append(ErrorNote("fleet.coverage", f"nginx-prometheus-exporter could not read nginx's stub_status at "
                                                 f"some scrape (nginx_up 0) on {len(blind)} nodes: "
                                                 + ", ".join(blind[:10]) + "; their nginx counts cover part of "
                                                 "the window, and nginx may have been down"))
    return notes


def _router_row(r: RouterUpstream) -> RouterRow:
    dropped = r.accepted - r.handled if r.accepted is not None and r.handled is not None else None
    return RouterRow(r.node, r.router, r.upstream, r.requests, r.errors_5xx, r.retries, r.pending_max, r.healthy_min,
                     r.members_max, r.panic, r.none_healthy,
                     tuple(f"{s.name} {s.state}" for s in r.servers if s.state != "UP")[:50],
                     r.connections_active_max, None if dropped is None else max(0.0, dropped))


def _gpu_mean(gpus: Sequence[FleetGpu], signal: str, how: str = "mean") -> float | None:
    values: list[float] = [v for g in gpus if signal in g.signals
                           if (v := getattr(g.signals[signal], how)) is not None]
    if not values:
        return None
    if how == "max":
        return round(max(values), 2)
    return round(sum(values) / len(values), 2)


def _node_row(node: str, gpus: Sequence[FleetGpu], host: FleetHost | None, findings: Sequence[Finding],
              dcgm_expected: bool) -> NodeHealth:
    absent = []
    if not gpus and dcgm_expected:
        absent.append("dcgm-exporter")
    if host is None:
        absent.append("node_exporter")
    health = _worst(findings)
    if health == "ok" and absent:  # evidence that is missing is not healthy
        health = "unknown"
    xids = tuple(int(g.signals["xid"].last or 0) for g in gpus if "xid" in g.signals and (g.signals["xid"].last or 0))
    shares = [g.throttled_share for g in gpus if g.throttled_share is not None]
    power = [g.signals["power_w"].mean for g in gpus if "power_w" in g.signals]
    row = NodeHealth(node=node, health=health, codes=tuple(sorted({f.code for f in findings})), gpus=len(gpus),
                     gpu_util_mean_pct=_gpu_mean(gpus, "util_pct"), gpu_temp_max_c=_gpu_mean(gpus, "temp_c", "max"),
                     sm_clock_mean_mhz=_gpu_mean(gpus, "sm_clock_mhz"),
                     gpu_power_mean_w=round(sum(p for p in power if p is not None), 1) if power else None,
                     throttled_share_max=round(max(shares), 3) if shares else None, xid=xids, absent=tuple(absent))
    if host is None:
        return row
    s = host.signals
    total, avail = memory(host)
    disks = [100 * (1 - d.avail_bytes_min / d.size_bytes) for d in host.disks if d.size_bytes]
    cpu = s["cpu_util_pct"].mean if "cpu_util_pct" in s else None
    tw = s["tcp_time_wait"].max if "tcp_time_wait" in s else None
    return replace(row, cpu_util_pct=round(cpu, 1) if cpu is not None else None,
                   mem_available_pct=round(100 * avail / total, 1) if total else None,
                   disk_used_max_pct=round(max(disks), 1) if disks else None, tcp_time_wait=tw)


def _containers_summary(containers: ContainerEvidence | None) -> ContainerSummary | None:
    if containers is None:
        return None
    restarted = [c for c in containers.restarts if c.restarts > 0]
    return ContainerSummary(
        restarts=round(sum(c.restarts for c in restarted), 2), containers_restarted=len(restarted),
        oom_killed=tuple(c.name for c in containers.restarts if c.last_terminated_reason == "OOMKilled")[:50],
        crash_looping=tuple(c.name for c in containers.restarts if c.waiting_reason)[:50],
        not_ready=tuple(f"{p.namespace}/{p.pod}" for p in containers.not_ready)[:50],
        pending_gpu_pods=tuple(f"{p.namespace}/{p.pod}" for p in containers.pending_gpu_pods)[:50])


def _metrics(options: FleetOptions, client: PrometheusClient, window: Window, gathered: Gathered | None,
             findings: Sequence[Finding], info: dict[str, str], onsets: Sequence[Onset], lines: Sequence[SeriesLine],
             changes: Sequence[Change], *, reachable: bool = True) -> FleetMetrics:
    evidence = gathered.evidence if gathered is not None else FleetEvidence(window=window)
    by_node: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        node = _node_of(finding)
        if node is not None:
            by_node[node].append(finding)
    gpus_by_node: dict[str, list[FleetGpu]] = defaultdict(list)
    for gpu in evidence.gpus:
        gpus_by_node[gpu.node].append(gpu)
    hosts = {h.node: h for h in evidence.hosts}
    coverage = []
    for cov in evidence.coverage:
        coverage.append(SourceCoverage(cov.source, len(cov.nodes_seen), len(cov.nodes_expected),
                                       cov.missing[:MISSING_NAMED], cov.failed))
    if gathered is not None:
        coverage.append(SourceCoverage("kube-state-metrics", 1 if gathered.containers is not None else 0, 1))
        coverage.append(SourceCoverage("router", len({r.node for r in evidence.routers}),
                                       len({r.node for r in evidence.routers})))
        coverage.append(SourceCoverage("model-server", len({s.node for s in evidence.servers}),
                                       len({s.node for s in evidence.servers})))
    dcgm_expected = {n for c in evidence.coverage if c.source == "dcgm-exporter" for n in c.nodes_expected}
    every = set(gpus_by_node) | set(hosts) | set(by_node) | {n for c in evidence.coverage for n in c.nodes_expected}
    rows = [_node_row(n, gpus_by_node.get(n, []), hosts.get(n), by_node.get(n, []), n in dcgm_expected)
            for n in every if n and not n.startswith("(")]
    order = {"critical": 0, "high": 1, "medium": 2, "low": 3, "info": 4, "unknown": 5, "ok": 6}
    rows.sort(key=lambda r: (order.get(r.health, 7), r.node))
    throttled = [g for g in evidence.gpus if g.throttled_share is not None]
    xid_known = [g for g in evidence.gpus if "xid" in g.signals]
    temps = [g.signals["temp_c"].max for g in evidence.gpus if "temp_c" in g.signals]
    containers = gathered.containers if gathered is not None else None
    stats = client.stats
    headline = FleetHeadline(
        nodes=len(rows), gpus=len(evidence.gpus), nodes_with_findings=len(by_node), findings=len(findings),
        queries=stats.queries, bytes_fetched=stats.bytes_fetched, query_seconds=round(stats.seconds, 3),
        window_s=window.seconds, step_s=window.step_s, gpu_util_mean_pct=_gpu_mean(evidence.gpus, "util_pct"),
        gpu_temp_max_c=max((t for t in temps if t is not None), default=None),
        gpus_throttled=sum(1 for g in throttled if (g.throttled_share or 0) >= 0.1) if throttled else None,
        gpus_with_xid=sum(1 for g in xid_known if (g.signals["xid"].last or 0) > 0) if xid_known else None,
        stragglers=sum(1 for f in findings if f.code == "N013"),
        container_restarts=round(sum(c.restarts for c in containers.restarts), 2) if containers else None,
    )
    onset_rows = tuple(OnsetRow(o.code, o.entity, o.signal, iso(o.first_bad) if o.first_bad is not None else None,
                                o.bad_at_start) for o in onsets)
    timeline = tuple(TimelineSeries(line.name, line.signal, tuple((round(t - window.start, 3), v)
                                                                 for t, v in line.points))
                     for line in lines)
    in_window = [c for c in changes if window.start - 86400 <= c.at <= window.end]
    return FleetMetrics(
        headline=headline, window=WindowInfo(iso(window.start), iso(window.end), window.step_s),
        prometheus=PrometheusInfo(redact_url(client.base), info.get("version"), client.credentials.kind, reachable),
        coverage=tuple(coverage), nodes=tuple(rows),
        routers=tuple(_router_row(r) for r in evidence.routers[:MAX_ROWS]),
        servers=tuple(ServerRow.of(s) for s in evidence.servers[:MAX_ROWS]),
        containers=_containers_summary(containers), onsets=onset_rows, timeline=timeline,
        changes=tuple(ChangeRow(iso(c.at), c.description, c.node) for c in in_window[:200]),
    )

