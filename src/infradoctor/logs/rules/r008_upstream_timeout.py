"""R008 upstream-timeout, from router logs, with the router's timeout inferred from the durations.

What it detects:
    The router gave up waiting for an upstream: Envoy ``UT`` / "upstream request timeout", nginx "upstream timed out
    (110: ...)" (504 in the access log), HAProxy ``sH``/``sD``.

Why it matters:
    The backend may still be computing the answer (burning GPU time) after the client got a 504. When the timeouts
    cluster at one duration, that duration is the router's timeout, and it is shorter than the backend's latency.

How it is measured:
    Signature catalog matches merged into incidents. The request durations logged with timeout lines are
    histogrammed; when at least :data:`CLUSTER_SHARE` (80%) of them lie within :data:`CLUSTER_TOLERANCE` (10%, at
    least :data:`CLUSTER_MIN_MS` = 50 ms) of their median, the median is reported as the inferred router timeout and
    compared with the successful requests' p99.

Fix:
    Raise the router timeout (nginx proxy_read_timeout, Envoy route timeout, HAProxy timeout server) above the
    backend's p99 at the expected load, or make the backend faster; do not retry timed-out non-idempotent requests.
"""

from __future__ import annotations

from infradoctor.findings import Finding, make_finding
from infradoctor.logs.evidence import LogsEvidence, hist_quantile
from infradoctor.logs.rules import RuleOptions
from infradoctor.logs.rules._signature import incident_summary, largest_file

CODE = "R008"
CLUSTER_SHARE = 0.8
"""Share of timeout durations that must sit near their median to call it the router's timeout."""
CLUSTER_TOLERANCE = 0.1
"""How near: within this fraction of the median ..."""
CLUSTER_MIN_MS = 50
"""... or this many milliseconds, whichever is larger."""


def infer_timeout_ms(durations: dict[int, int]) -> tuple[float | None, float]:
    """(inferred timeout in ms or None, share of durations near the median)."""
    median = hist_quantile(durations, 0.5)
    total = sum(durations.values())
    if median is None or total == 0:
        return None, 0.0
    tolerance = max(CLUSTER_MIN_MS, CLUSTER_TOLERANCE * median)
    near = sum(c for ms, c in durations.items() if abs(ms - median) <= tolerance)
    share = near / total
    return (median if share >= CLUSTER_SHARE else None), share


def check(evidence: LogsEvidence, options: RuleOptions) -> list[Finding]:
    """One finding with every timeout incident and the inferred timeout."""
    incidents = evidence.incidents_of("upstream_timeout")
    if not incidents:
        return []
    summary = incident_summary(incidents)
    durations = dict(evidence.signature_durations.get("upstream_timeout", {}))
    timeout_ms, share = infer_timeout_ms(durations)
    success_p99 = hist_quantile(evidence.success_hist, 0.99)
    count = int(str(summary["count"]))
    title = f"{count} request{'s' if count != 1 else ''} timed out at the router"
    if timeout_ms is not None:
        title += f" after ~{timeout_ms / 1000:.2f} s (inferred router timeout)"
    fix = None
    if timeout_ms is not None:
        fix = (f"The router's timeout looks like ~{timeout_ms / 1000:.2f} s. Raise it (nginx proxy_read_timeout, "
               "Envoy route timeout, HAProxy timeout server) above the backend's p99 at the expected load, or make "
               "the backend faster; do not retry timed-out non-idempotent requests.")
    return [make_finding(CODE, title, {
        **summary,
        "inferred_timeout_ms": timeout_ms,
        "durations_near_median_share": round(share, 3),
        "timed_requests": sum(durations.values()),
        "success_p99_ms": success_p99,
    }, fix=fix, impact=min(1.0, int(str(summary["count"])) / evidence.requests) if evidence.requests else None,
        location=largest_file(incidents))]
