"""Routers and model servers from Prometheus as the evidence ``route --router-stats`` and ``load`` read.

One :class:`~infradoctor.telemetry.evidence.RouterEvidence` per router (its upstreams' counters summed over the
window, as the router-statistics sampler sums clusters and backends) and one
:class:`~infradoctor.telemetry.evidence.ServerEvidence` per model server (the window as its one point), so
R003, R005, R009, R010, R013 and S010-S012 judge them with their own thresholds. There is no client here: the
router's own request count stands in for the client's, and the server rules that compare with client latency stay
silent. Only the maxima of gauges are queried; a gauge's mean and last are set to its maximum (the checks read the
maximum alone), except the healthy members, whose minimum is what the window's worst moment had.

Upstream health: HAProxy's servers come with their worst state and error counters (``haproxy_server_*``), as
``route --router-stats`` reads them from its exporter. Envoy's ``/stats/prometheus`` names no host: a cluster
whose healthy members fell below its members stands in as one host of that cluster, failing the router's health
checks, named by the count (``models (1 of 2 hosts unhealthy)``); panic routing (``lb_healthy_panic``) and
"no healthy upstream" answers (``upstream_cx_none_healthy``) are the counters R010 and R013 read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from infradoctor.findings import Finding, Location, run_rules
from infradoctor.fleet.evidence import ModelServer, RouterUpstream
from infradoctor.telemetry.evidence import GaugeSeries, RouterEvidence, RouterWindow, ServerEvidence, ServerPoint
from infradoctor.telemetry.evidence import ServerWindow as TelemetryServerWindow
from infradoctor.telemetry.router import HostState, haproxy_state

_COUNTERS = (("requests", "requests"), ("retries", "retries"), ("pending_overflow", "pending_overflow"),
             ("errors_5xx", "responses_5xx"), ("panic", "panic"), ("none_healthy", "none_healthy"),
             ("server_errors_5xx", "server_responses_5xx"), ("accepted", "accepts"), ("handled", "handled"))
"""Our counters and the canonical names the router rules read."""

_GAUGES = (("pending_max", "pending_active", max), ("healthy_min", "membership_healthy", min),
           ("members_max", "membership_total", max), ("connections_active_max", "connections_active", max),
           ("connections_waiting_max", "waiting", max))
"""Our gauges, the canonical names and how upstreams combine (the healthy minimum stays a minimum)."""


def _hosts(upstreams: Sequence[RouterUpstream]) -> tuple[list[HostState], dict[str, str]]:
    """HAProxy's servers as the router rules' hosts, and Envoy's unhealthy members as one host per cluster."""
    hosts: list[HostState] = []
    worst: dict[str, str] = {}
    for upstream in upstreams:
        for server in upstream.servers:
            state = haproxy_state(server.state)
            hosts.append(HostState(server.name, None, upstream.upstream, state, server.state, dict(server.counters)))
            worst[f"{upstream.upstream}/{server.name}"] = state
        if upstream.router == "envoy" and upstream.healthy_min is not None and upstream.members_max:
            unhealthy = upstream.members_max - upstream.healthy_min
            if unhealthy > 0:
                name = f"{upstream.upstream} ({unhealthy:.0f} of {upstream.members_max:.0f} hosts unhealthy)"
                flags = (f"membership_healthy fell to {upstream.healthy_min:.0f} of {upstream.members_max:.0f}; "
                         "Prometheus names no host: /clusters on the router's admin does")
                hosts.append(HostState(name, None, upstream.upstream, "failing", flags))
                worst[f"{upstream.upstream}/{name}"] = "failing"
    return hosts, worst


def router_evidence(node: str, router: str, upstreams: Sequence[RouterUpstream]) -> RouterEvidence:
    """One router's evidence over the window."""
    counters: dict[str, float] = {}
    for ours, canonical in _COUNTERS:
        values = [v for u in upstreams if (v := getattr(u, ours)) is not None]
        if values:
            counters[canonical] = sum(values)
    gauges: dict[str, GaugeSeries] = {}
    for ours, canonical, combine in _GAUGES:
        values = [v for u in upstreams if (v := getattr(u, ours)) is not None]
        if values:
            # pending: the largest one upstream's queue reached (never more than was seen); healthy members:
            # the fewest any one upstream had (a cluster with none is what panic and R013 are about)
            peak = combine(values)
            gauges[canonical] = GaugeSeries(max=peak, mean=peak, last=peak)
    if router == "nginx" and "requests" in counters:
        counters["client_requests"] = counters.pop("requests")  # nginx counts what clients sent it
    hosts, worst = _hosts(upstreams)
    window = RouterWindow(source=f"{node} {router} via Prometheus", kind=router, format="prometheus", reads=1,
                          failed_reads=0, counters=counters, gauges=gauges, hosts=tuple(hosts), worst_states=worst)
    return RouterEvidence(window=window)


def server_evidence(server: ModelServer, steps: int) -> ServerEvidence:
    """One model server's evidence: the window is its one point."""
    window = TelemetryServerWindow(
        source=f"{server.node} {server.server} via Prometheus", kind=server.server, reads=steps,
        waiting_max=server.queue_max, waiting_mean=server.queue_mean, running_mean=server.running_mean,
        kv_cache_usage_max=server.kv_cache_max, preemptions=server.preemptions)
    point = ServerPoint(label="over the window", concurrency=None, rate=None, client_requests=0,
                        client_p50_ms=None, client_p99_ms=None, client_ttft_p99_ms=None, server=window)
    return ServerEvidence(source=window.source, kind=server.server, points=(point,))


def _named(findings: Sequence[Finding], node: str, what: str) -> list[Finding]:
    return [replace(f, title=f"{node}: {what}: {f.title}", location=Location(file=f"{node} {what}"),
                    evidence={"node": node, **f.evidence}) for f in findings]


def service_findings(routers: Sequence[RouterUpstream], servers: Sequence[ModelServer], steps: int) -> list[Finding]:
    """The router and model-server rules over every router and server, each finding naming its node."""
    by_router: dict[tuple[str, str], list[RouterUpstream]] = defaultdict(list)
    for upstream in routers:
        by_router[(upstream.node, upstream.router)].append(upstream)
    findings: list[Finding] = []
    for (node, router), upstreams in sorted(by_router.items()):
        findings += _named(run_rules(router_evidence(node, router, upstreams)), node, router)
    for server in servers:
        what = server.server + (f" {server.model}" if server.model != "-" else "")
        findings += _named(run_rules(server_evidence(server, steps)), server.node, what)
    return findings
