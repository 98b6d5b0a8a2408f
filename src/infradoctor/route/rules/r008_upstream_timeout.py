"""R008 upstream-timeout: routed requests fail at one fixed duration, the router's upstream timeout.

What it detects:
    Routed requests that end in 504/408 (or the client's own read timeout) pile up at one duration. That
    duration is the timeout that cut them off; the finding compares it with the backends' own latency measured
    directly.

Why it matters:
    A router timeout below the backends' tail latency turns slow-but-successful requests into errors, and the
    work the backend did is wasted (often retried, see R005). For LLM endpoints with long generations, default
    timeouts (nginx ``proxy_read_timeout`` 60 s, Envoy route timeout 15 s) are a common cause of 504s.

How it is measured:
    Durations of timeout-class routed errors (``http_504``, ``http_408``, ``read_timeout``) are sorted and the
    largest group within a window of +/-5% (at least 15 ms) is taken. It counts when it holds at least
    ``TIMEOUT_MIN_ERRORS`` errors and half of the timeout-class errors, at ``TIMEOUT_MIN_MS`` or more
    (``route/analysis.py``). Its median, divided by the upstream attempts each of those requests made (nginx
    retries a timed-out attempt on the next upstream by default), is the inferred timeout; it is compared with the
    slowest backend's direct p99. A cluster made of the client's own read timeouts is reported as S007 instead.

Fix:
    Raise the router's timeout above the backends' p99 at the expected load (nginx ``proxy_read_timeout``,
    HAProxy ``timeout server``, Envoy route ``timeout``), or make the backend faster; for streaming responses
    the timeout applies between reads, so stream tokens early.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Severity, make_finding
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions

CODE = "R008"


def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R008 when routed errors cluster at a router timeout."""
    cluster = evidence.timeout
    if cluster is None or set(cluster.statuses) == {"read_timeout"}:
        return []
    p99 = cluster.backend_p99_ms
    timeout = cluster.per_attempt_ms
    title = f"The router times out at about {timeout / 1000:.2f} s"
    if cluster.attempts > 1:
        title += f" per attempt ({cluster.attempts} attempts, {cluster.timeout_ms / 1000:.2f} s in all)"
    title += f" ({cluster.count} errors)"
    if p99 is not None:
        relation = "above" if p99 >= timeout else "below"
        title += f"; backends' direct p99 is {p99 / 1000:.2f} s, {relation} it"
    below_tail = p99 is not None and p99 >= 0.9 * timeout
    return [
        make_finding(
            CODE,
            title,
            {
                "inferred_timeout_ms": round(timeout, 3),
                "attempts": cluster.attempts,
                "total_ms": round(cluster.timeout_ms, 3),
                "clustered_errors": cluster.count,
                "routed_errors": cluster.routed_errors,
                "error_classes": dict(cluster.statuses),
                "spread_ms": round(cluster.spread_ms, 3),
                "backend_p99_ms": p99,
                "backend_p50_ms": cluster.backend_p50_ms,
                "timeout_below_backend_p99": below_tail,
                "router_requests": evidence.router.requests,
            },
            severity=Severity.HIGH,
            impact=min(1.0, cluster.count / evidence.router.requests) if evidence.router.requests else None,
        )
    ]
