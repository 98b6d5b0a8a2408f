"""R002 backend-slow, from router access logs.

What it detects:
    Requests are slow and the time is spent in the upstream, not in the router.

Why it matters:
    It tells where to look: tuning the router will not help; the backend (model server, model, its GPU) is the
    bottleneck, or it is overloaded.

How it is measured:
    The p99 of successful requests (status below 500; failures are R006-R008's) is at least :data:`SLOW_P99_MS` (1 s)
    and the router's own time (request minus upstream, see R001)
    is at most :data:`ROUTER_SHARE_MAX` (10%) of it, with at least ``min_requests`` requests that log both times.

Fix:
    Diagnose the backend directly (``infradoctor load`` against it, ``infradoctor profile`` of the server); add
    replicas if it is overloaded.
"""

from __future__ import annotations

from infradoctor.findings import Finding, make_finding
from infradoctor.logs.evidence import LogsEvidence, hist_quantile
from infradoctor.logs.rules import RuleOptions

CODE = "R002"
SLOW_P99_MS = 1000.0
"""Request p99 at or above which requests count as slow."""
ROUTER_SHARE_MAX = 0.1
"""The router's p99 time must be at most this share of the request p99."""


def check(evidence: LogsEvidence, options: RuleOptions) -> list[Finding]:
    """Slow requests whose time is upstream time."""
    request_p99 = hist_quantile(evidence.success_hist, 0.99)
    router_p99 = evidence.overhead_p99_ms
    if request_p99 is None or router_p99 is None or evidence.overhead_samples < options.min_requests:
        return []
    if request_p99 < SLOW_P99_MS or router_p99 > ROUTER_SHARE_MAX * request_p99:
        return []
    return [make_finding(CODE, f"Successful requests take {request_p99:.0f} ms at p99 and the router adds only "
                         f"{router_p99:.0f} ms: the backends are slow", {
                             "success_p99_ms": request_p99, "upstream_p99_ms": evidence.upstream_p99_ms,
                             "router_p99_ms": router_p99, "requests": evidence.overhead_samples,
                         })]
