"""S007 client-timeout-too-low (from route): the client's own timeout cuts off slow routed requests.

What it detects:
    Requests that end in the client's own read timeout while the service keeps working on them: from
    ``infradoctor route``, routed requests that end at the client timeout (``--timeout``) at one fixed duration;
    from a load test (``infradoctor load``), read timeouts on at least ``MIN_TIMEOUT_RATE`` of requests at a load
    the service otherwise handles (at or below the knee, every point when there is no knee), so the timeouts come
    from the service's normal tail, not from overload.

Why it matters:
    A client timeout below the service's tail latency turns slow requests into errors: the server did its full work
    and the client gets nothing; retrying clients then multiply the load. When the timeout sits inside the service's
    latency distribution, a share of users fails at any load.

How it is measured:
    The same timeout cluster as R008 (``route/analysis.py``), made only of ``read_timeout`` errors, compared with
    the client timeout and the slowest backend's direct p99.

    From a load test (`infradoctor load`): Read timeouts per point (the request was sent and the response did not
    complete within ``timeout_s``; those requests are kept in the latency histogram at the timeout). The finding
    names the lowest such point, the timeout and the slowest successful response.

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor route``) or ``load`` (``infradoctor load``, ``profile --load-url``).
    - ``timeout_s``: the client's read timeout (s; None when there is none).
    - ``read_timeouts``: requests that ended in it (routed ones; in a load test, at the point named).
    - ``read_timeout_rate``: their share of the requests (0-1).

    From the probe also: ``clustered_errors``, ``observed_timeout_ms`` (the duration they cluster at),
    ``backend_p99_ms`` (the slowest backend's direct p99).

    From a load test also: ``point`` (the lowest point with read timeouts), ``ok_max_ms`` (its slowest successful
    response), ``p99_ms``.

Fix:
    Raise the client timeout above the service's p99 (p99.9 for retried calls) at the expected load, or find and
    remove the slow tail (stalls, GC pauses, cold caches) on the server.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.load.evidence import LoadEvidence
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions

RULE = Rule(
    "S007",
    "client-timeout-too-low",
    Severity.MEDIUM,
    "Client timeout is below the service's tail latency",
    fix="Raise the timeout above the service's p99 at the expected load, or reduce the tail.",
    risk="Longer timeouts hold connections and retries longer.",
    commands=("load", "profile", "route"),
)


@RULE.check(RouteEvidence, RuleOptions)
def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """S007 when routed errors cluster at the client's own timeout."""
    cluster = evidence.timeout
    if cluster is None or set(cluster.statuses) != {"read_timeout"}:
        return []
    timeouts = max(cluster.count, evidence.router.errors.get("read_timeout", 0))
    requests = evidence.router.requests
    return [
        RULE.finding(
            f"{cluster.count} routed requests hit the client timeout of {evidence.client_timeout_s:g} s",
            {
                "source": "probe",
                "timeout_s": evidence.client_timeout_s,
                "read_timeouts": timeouts,
                "read_timeout_rate": round(timeouts / requests, 5) if requests else None,
                "clustered_errors": cluster.count,
                "observed_timeout_ms": round(cluster.timeout_ms, 3),
                "backend_p99_ms": cluster.backend_p99_ms,
            },
        )
    ]


MIN_TIMEOUT_RATE = 0.005
"""Read timeouts on at least this share of requests at a non-overloaded point."""


@RULE.check(LoadEvidence, None)
def check_load(evidence: LoadEvidence, options: Mapping[str, Any] | None = None) -> list[Finding]:
    """S007 when read timeouts occur below the knee."""
    points = evidence.valid_points
    if evidence.knee:
        limit = float(evidence.knee.get("level", math.inf))
        points = [p for p in points if p.level <= limit]
    hits = [p for p in points if p.completed and p.read_timeouts / p.completed >= MIN_TIMEOUT_RATE]
    if not hits:
        return []
    point = min(hits, key=lambda p: p.level)
    rate = point.read_timeouts / point.completed
    timeout_text = f"{evidence.timeout_s:g} s" if math.isfinite(evidence.timeout_s) else "the timeout"
    return [
        RULE.finding(
            f"{rate:.1%} of requests hit the {timeout_text} client timeout at {point.label}, below the knee",
            {
                "source": "load",
                "timeout_s": evidence.timeout_s if math.isfinite(evidence.timeout_s) else None,
                "read_timeouts": point.read_timeouts,
                "read_timeout_rate": round(rate, 5),
                "point": point.label,
                "ok_max_ms": round(point.ok_max_ms, 3) if math.isfinite(point.ok_max_ms) else None,
                "p99_ms": round(point.p99_ms, 3),
            },
        )
    ]
