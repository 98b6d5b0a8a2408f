"""S007 client-timeout-too-low (from route): the client's own timeout cuts off slow routed requests.

What it detects:
    Routed requests that end in the client's read timeout (``--timeout``) at one fixed duration while the
    service keeps working on them.

Why it matters:
    A client timeout below the service's tail latency turns slow requests into errors and wastes the work the
    service did; retrying clients multiply the load.

How it is measured:
    The same timeout cluster as R008 (``route/analysis.py``), made only of ``read_timeout`` errors, compared with
    the client timeout and the slowest backend's direct p99.

Fix:
    Raise the client timeout above the service's p99 at the expected load, or make the service faster.
"""

from __future__ import annotations

from infradoctor.findings import Finding, make_finding
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions

CODE = "S007"


def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """S007 when routed errors cluster at the client's own timeout."""
    cluster = evidence.timeout
    if cluster is None or set(cluster.statuses) != {"read_timeout"}:
        return []
    return [
        make_finding(
            CODE,
            f"{cluster.count} routed requests hit the client timeout of {evidence.client_timeout_s:g} s",
            {
                "client_timeout_s": evidence.client_timeout_s,
                "clustered_errors": cluster.count,
                "observed_timeout_ms": round(cluster.timeout_ms, 3),
                "backend_p99_ms": cluster.backend_p99_ms,
            },
        )
    ]
