"""R003 unhealthy-backend, from router access logs: one upstream's errors or latency stand out.

What it detects:
    An upstream whose error rate or p99 latency is far above the other upstreams' in the same logs.

Why it matters:
    The router keeps sending it a share of the traffic, so a single sick replica (bad GPU, stuck worker, wrong
    model version) fails or slows that share of all requests.

How it is measured:
    Per upstream with at least ``min_requests`` attempts: error rate (5xx or no status) at least
    :data:`ERROR_RATE_MIN` (5%) and at least :data:`OUTLIER_FACTOR` (3) times the median of the others; or p99
    at least :data:`LATENCY_P99_MIN_MS` (100 ms) and :data:`OUTLIER_FACTOR` times the others' median p99. Needs
    two or more upstreams.

Fix:
    Drain or restart that backend and check its node (``infradoctor node``); enable outlier detection or passive
    health checks (nginx max_fails, Envoy outlier_detection, HAProxy observe layer7) so it is ejected automatically.
"""

from __future__ import annotations

import statistics

from infradoctor.findings import Finding, make_finding
from infradoctor.logs.evidence import LogsEvidence, UpstreamStats
from infradoctor.logs.rules import RuleOptions

CODE = "R003"
ERROR_RATE_MIN = 0.05
"""Error rate at or above which an upstream can be an outlier."""
OUTLIER_FACTOR = 3.0
"""How many times the others' median an upstream must reach."""
LATENCY_P99_MIN_MS = 100.0
"""p99 at or above which a latency outlier matters."""


def check(evidence: LogsEvidence, options: RuleOptions) -> list[Finding]:
    """Error-rate and latency outliers among upstreams."""
    pool = [u for u in evidence.upstreams if u.attempts >= options.min_requests and u.upstream != "-"]
    if len(pool) < 2:
        return []
    findings = []
    for upstream in pool:
        others = [u for u in pool if u is not upstream]
        finding = _error_outlier(upstream, others) or _latency_outlier(upstream, others)
        if finding is not None:
            findings.append(finding)
    return findings


def _error_outlier(upstream: UpstreamStats, others: list[UpstreamStats]) -> Finding | None:
    baseline = statistics.median(u.error_rate for u in others)
    rate = upstream.error_rate
    if rate < ERROR_RATE_MIN or rate < OUTLIER_FACTOR * baseline:
        return None
    return make_finding(CODE, f"{upstream.upstream} fails {rate:.0%} of its requests (others: {baseline:.1%})", {
        "upstream": upstream.upstream, "error_rate": round(rate, 4), "errors": upstream.errors,
        "attempts": upstream.attempts, "others_median_error_rate": round(baseline, 4),
    })


def _latency_outlier(upstream: UpstreamStats, others: list[UpstreamStats]) -> Finding | None:
    values = [u.p99_ms for u in others if u.p99_ms is not None]
    if upstream.p99_ms is None or not values:
        return None
    baseline = statistics.median(values)
    if upstream.p99_ms < LATENCY_P99_MIN_MS or upstream.p99_ms < OUTLIER_FACTOR * max(baseline, 1.0):
        return None
    return make_finding(CODE, f"{upstream.upstream} p99 is {upstream.p99_ms:.0f} ms (others: {baseline:.0f} ms)", {
        "upstream": upstream.upstream, "p99_ms": upstream.p99_ms, "p50_ms": upstream.p50_ms,
        "attempts": upstream.attempts, "others_median_p99_ms": baseline,
    }, severity=None)
