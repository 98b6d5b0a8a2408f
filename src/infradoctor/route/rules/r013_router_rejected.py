"""R013 router-rejected: the router itself answered requests with an error, and says why.

What it detects:
    Errors the router returned without a backend answering them, counted by the router: Envoy's pending-queue
    overflow (``upstream_rq_pending_overflow``: 503 with flag ``UO``, a circuit breaker's ``max_pending_requests``
    reached) and "no healthy upstream" (``upstream_cx_none_healthy``: 503 ``UH``); HAProxy's 5xx answers beyond
    those its servers sent (a full queue or ``timeout queue``: 503 with termination state ``sQ``); nginx
    connections accepted but not handled (``worker_connections`` reached).

Why it matters:
    These errors never reached a model, so backend logs and metrics show nothing: the limit that refused them is
    in the router's configuration. Seen from outside they are 503s like any other, and a load test blames the
    backends (or, as the latency of the requests that waited, the router's own speed).

How it is measured:
    From ``--router-stats``: the counters' growth over the run. Reported when the router rejected at least
    ``MIN_REJECTED`` requests and at least ``MIN_SHARE`` of the client's requests; the evidence carries the
    cause, the configured limit (Envoy ``/clusters`` circuit breakers, HAProxy ``maxqueue``) and the client's own
    count of the same status.

Fix:
    Raise the limit in step with what the backends can serve (Envoy ``circuit_breakers`` ``max_pending_requests``
    and ``max_connections``; HAProxy ``maxconn``/``maxqueue`` per server and ``timeout queue``; nginx
    ``worker_connections``), or add backend capacity. Where shedding is wanted, answer 429 with ``Retry-After``
    so clients back off instead of retrying at once.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.route.rules._router import client_requests, counter, gauge_max
from infradoctor.telemetry.evidence import RouterEvidence

RULE = Rule(
    "R013",
    "router-rejected",
    Severity.HIGH,
    "The router rejected requests itself",
    fix="Raise the router limit that refused them (circuit breaker, queue, connections) with backend capacity.",
    risk="Higher limits let more requests wait in queues; size them to what the backends serve.",
    commands=("route", "load"),
)

MIN_REJECTED = 3
"""Rejections needed."""

MIN_SHARE = 0.01
"""... and their smallest share of the client's requests."""


def _causes(evidence: RouterEvidence) -> list[tuple[str, float, str]]:
    kind = evidence.window.kind
    limits = evidence.window.limits
    out: list[tuple[str, float, str]] = []
    overflow = counter(evidence, "pending_overflow")
    if overflow:
        limit = limits.get("max_pending_requests")
        conns = limits.get("max_connections")
        where = (f"max_pending_requests {limit:g}" if limit is not None else "the pending-request limit") + (
            f", max_connections {conns:g}" if conns is not None else "")
        out.append(("pending_overflow", overflow, f"the circuit breaker's pending queue was full ({where}; 503 UO)"))
    none_healthy = counter(evidence, "none_healthy")
    if none_healthy:
        out.append(("no_healthy_upstream", none_healthy, "no healthy upstream (503 UH)"))
    if kind == "haproxy":
        own = counter(evidence, "responses_5xx") - counter(evidence, "server_responses_5xx")
        if own > 0:
            qmax = gauge_max(evidence, "pending_max")
            limit = evidence.window.limits.get("queue_limit")
            detail = f"queue max {qmax:g}" + (f", maxqueue {limit:g}" if limit else "")
            out.append(("queue", own, f"HAProxy answered 5xx itself: queue full or timed out in it ({detail}; sQ)"))
    if kind == "nginx":
        dropped = counter(evidence, "accepts") - counter(evidence, "handled")
        if dropped > 0:
            out.append(("connections_dropped", dropped, "connections accepted but not handled (worker_connections)"))
    return out


@RULE.check(RouterEvidence)
def check(evidence: RouterEvidence, options: object) -> list[Finding]:
    """R013 for each cause of rejections the router counted."""
    clients = client_requests(evidence)
    findings = []
    for cause, count, words in _causes(evidence):
        share = count / clients if clients else None
        if count < MIN_REJECTED or (share is not None and share < MIN_SHARE):
            continue
        client_503 = evidence.client_errors.get("http_503")
        title = f"The router rejected {count:.0f} requests itself" + (
            f" ({share:.0%} of {clients:.0f})" if share is not None else "") + f": {words}"
        findings.append(RULE.finding(
            title,
            {"router_stats": evidence.window.source, "router": evidence.window.kind, "cause": cause,
             "rejected": count, "client_requests": clients or None, "share": None if share is None else round(share, 4),
             "client_http_503": client_503, "limits": dict(evidence.window.limits)},
            impact=min(1.0, share or 0.0),
        ))
    return findings
