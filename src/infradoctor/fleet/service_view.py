"""Routers and model servers from Prometheus as the evidence ``route --router-stats`` and ``load`` read.

One :class:`~infradoctor.telemetry.evidence.RouterEvidence` per router (its upstreams' counters summed over the
window, as the router-statistics sampler sums clusters and backends) and one
:class:`~infradoctor.telemetry.evidence.ServerEvidence` per model server (the window as its one point), so
R005, R009, R013 and S010-S012 judge them with their own thresholds. There is no client here: the router's own
request count stands in for the client's, and the server rules that compare with client latency stay silent.
Only the maxima of gauges are queried; a gauge's mean and last are set to its maximum (the checks read the
maximum alone).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from infradoctor.findings import Finding, Location, run_rules
from infradoctor.fleet.evidence import ModelServer, RouterUpstream
from infradoctor.telemetry.evidence import GaugeSeries, RouterEvidence, RouterWindow, ServerEvidence, ServerPoint
from infradoctor.telemetry.evidence import ServerWindow as TelemetryServerWindow

_COUNTERS = (("requests", "requests"), ("retries", "retries"), ("pending_overflow", "pending_overflow"),
             ("errors_5xx", "responses_5xx"))


def router_evidence(node: str, router: str, upstreams: Sequence[RouterUpstream]) -> RouterEvidence:
    """One router's evidence over the window."""
    counters: dict[str, float] = {}
    for ours, canonical in _COUNTERS:
        values = [v for u in upstreams if (v := getattr(u, ours)) is not None]
        if values:
            counters[canonical] = sum(values)
    gauges: dict[str, GaugeSeries] = {}
    pending = [u.pending_max for u in upstreams if u.pending_max is not None]
    if pending:
        peak = max(pending)  # the largest one upstream's queue reached: never more than was seen
        gauges["pending_active"] = GaugeSeries(max=peak, mean=peak, last=peak)
    window = RouterWindow(source=f"{node} {router} via Prometheus", kind=router, format="prometheus", reads=1,
                          failed_reads=0, counters=counters, gauges=gauges)
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
