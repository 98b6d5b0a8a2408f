"""R001 router-overhead, from router access logs: request time minus upstream time.

What it detects:
    Time the router itself adds: nginx ``$request_time`` minus ``$upstream_response_time``, Envoy ``%DURATION%``
    minus ``x-envoy-upstream-service-time``, HAProxy ``Ta`` minus ``Tr``.

Why it matters:
    When the router's share of the latency is large, scaling or tuning the backends will not help: the router is
    short of CPU or workers, buffers the body, opens a new upstream connection per request, or waits for a slow
    client.

How it is measured:
    Per request with exactly one upstream attempt and both times logged, the difference in whole ms into a
    histogram; the finding fires when its p99 is at least :data:`OVERHEAD_P99_MS` (100 ms) and at least
    :data:`OVERHEAD_SHARE` (20%) of the request p99 (at least ``min_requests`` such requests).

Fix:
    Give the router more CPU/workers, enable upstream keep-alive and connection pooling, turn off request/response
    buffering for streaming endpoints; check whether slow clients (large uploads) dominate the difference.
"""

from __future__ import annotations

from infradoctor.findings import Finding, make_finding
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.rules import RuleOptions

CODE = "R001"
OVERHEAD_P99_MS = 100.0
"""Router time p99 at or above which it matters."""
OVERHEAD_SHARE = 0.2
"""... and at least this share of the request p99."""


def check(evidence: LogsEvidence, options: RuleOptions) -> list[Finding]:
    """Router time p99 against the request p99."""
    p99 = evidence.overhead_p99_ms
    request_p99 = evidence.request_p99_ms
    if p99 is None or request_p99 is None or evidence.overhead_samples < options.min_requests:
        return []
    share = p99 / request_p99 if request_p99 > 0 else 0.0
    if p99 < OVERHEAD_P99_MS or share < OVERHEAD_SHARE:
        return []
    return [make_finding(CODE, f"The router adds {p99:.0f} ms at p99 ({share:.0%} of the request p99)", {
        "router_p50_ms": evidence.overhead_p50_ms, "router_p99_ms": p99, "request_p99_ms": request_p99,
        "upstream_p99_ms": evidence.upstream_p99_ms, "requests": evidence.overhead_samples,
        "share_of_request_p99": round(share, 3),
    }, impact=min(1.0, share))]
