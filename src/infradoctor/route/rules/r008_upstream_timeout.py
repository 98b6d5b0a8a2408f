"""R008 upstream-timeout: routed requests fail at one fixed duration, the router's upstream timeout.

What it detects:
    The router gave up waiting for an upstream, at one fixed duration: its upstream timeout. From
    ``infradoctor route``: routed requests that end in 504/408 (or the client's own read timeout) pile up at one
    duration, compared with the backends' own latency measured directly. From logs (``infradoctor logs``): Envoy
    ``UT`` / "upstream request timeout", nginx "upstream timed out (110: ...)" (504 in the access log), HAProxy
    ``sH``/``sD``, with the duration the logged timeouts cluster at.

Why it matters:
    A router timeout below the backends' tail latency turns slow-but-successful requests into errors, and the work
    the backend did is wasted: it may still be computing the answer (burning GPU time) after the client got a 504,
    and the request is often retried (see R005). For LLM endpoints with long generations, default timeouts (nginx
    ``proxy_read_timeout`` 60 s, Envoy route timeout 15 s) are a common cause of 504s.

How it is measured:
    Durations of timeout-class routed errors (``http_504``, ``http_408``, ``read_timeout``) are sorted and the
    largest group within a window of +/-5% (at least 15 ms) is taken. It counts when it holds at least
    ``TIMEOUT_MIN_ERRORS`` errors and half of the timeout-class errors, at ``TIMEOUT_MIN_MS`` or more
    (``route/analysis.py``). Its median, divided by the upstream attempts each of those requests made (nginx
    retries a timed-out attempt on the next upstream by default), is the inferred timeout; it is compared with the
    slowest backend's direct p99. A cluster made of the client's own read timeouts is reported as S007 instead.

    From logs (`infradoctor logs`): Signature catalog matches merged into incidents. The request durations logged
    with timeout lines are histogrammed; when at least :data:`CLUSTER_SHARE` (80%) of them lie within
    :data:`CLUSTER_TOLERANCE` (10%, at least :data:`CLUSTER_MIN_MS` = 50 ms) of their median, the median is reported
    as the inferred router timeout and compared with the successful requests' p99.

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor route``) or ``logs``.
    - ``inferred_timeout_ms``: the duration the timeouts pile up at, per upstream attempt (ms): the router's
      timeout; from logs None when fewer than ``CLUSTER_SHARE`` of them are near their median.
    - ``failures``: requests that timed out (timeout-class routed errors; from logs the failed requests of the
      incidents).
    - ``clustered_errors``: the timeouts whose duration lies in the cluster (from logs: near the median).
    - ``cluster_share``: ``clustered_errors`` over the timeouts whose duration is known (0-1).
    - ``spread_ms``: the largest distance of a clustered duration from the cluster's median (ms).

    From the probe also: ``attempts`` (upstream attempts per clustered error), ``total_ms`` (the cluster's whole
    duration), ``routed_errors``, ``error_classes``, ``backend_p99_ms`` and ``backend_p50_ms`` (the slowest
    backend's, direct), ``timeout_below_backend_p99``, ``router_requests``.

    From logs also: the incidents' summary (``count``, ``incidents``, ``files``, ``subjects``, ``first``, ``last``,
    ``windows``, ``example``), ``timed_requests`` (timeouts logged with a duration), ``success_p99_ms`` and
    ``success_n`` (successful requests, to compare the timeout with).

Fix:
    Raise the router's timeout above the backends' p99 at the expected load (nginx ``proxy_read_timeout``, HAProxy
    ``timeout server``, Envoy route ``timeout``), or make the backend faster; for streaming responses the timeout
    applies between reads, so stream tokens early; do not retry timed-out non-idempotent requests.
"""

from __future__ import annotations

from dataclasses import dataclass

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence, hist_quantile
from infradoctor.logs.incidents import LogsRuleOptions, incident_summary, largest_file
from infradoctor.route.analysis import TIMEOUT_ERROR_CLASSES
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions

RULE = Rule(
    "R008",
    "upstream-timeout",
    Severity.HIGH,
    "The router times out waiting for an upstream",
    fix="Raise the router timeout above the backend's p99, or reduce backend latency.",
    risk="Longer timeouts hold router connections longer under overload.",
    commands=("route", "logs"),
)


@RULE.check(RouteEvidence, RuleOptions)
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
    timeouts = max(cluster.count, sum(n for c, n in evidence.router.errors.items() if c in TIMEOUT_ERROR_CLASSES))
    return [
        RULE.finding(
            title,
            {
                "source": "probe",
                "inferred_timeout_ms": round(timeout, 3),
                "failures": timeouts,
                "clustered_errors": cluster.count,
                "cluster_share": round(cluster.count / timeouts, 3),
                "spread_ms": round(cluster.spread_ms, 3),
                "attempts": cluster.attempts,
                "total_ms": round(cluster.timeout_ms, 3),
                "routed_errors": cluster.routed_errors,
                "error_classes": dict(cluster.statuses),
                "backend_p99_ms": p99,
                "backend_p50_ms": cluster.backend_p50_ms,
                "timeout_below_backend_p99": below_tail,
                "router_requests": evidence.router.requests,
            },
            severity=Severity.HIGH,
            impact=min(1.0, cluster.count / evidence.router.requests) if evidence.router.requests else None,
        )
    ]


CLUSTER_SHARE = 0.8
"""Share of timeout durations that must sit near their median to call it the router's timeout."""
CLUSTER_TOLERANCE = 0.1
"""How near: within this fraction of the median ..."""
CLUSTER_MIN_MS = 50
"""... or this many milliseconds, whichever is larger."""


@dataclass(frozen=True)
class DurationCluster:
    """Logged timeout durations near their median."""

    timeout_ms: float | None
    """The median, when at least ``CLUSTER_SHARE`` of the durations are near it: the inferred router timeout."""
    near: int
    """Durations near the median."""
    share: float
    """... their share of all (0 without durations)."""
    spread_ms: float | None
    """The largest distance of a near duration from the median (ms)."""


def infer_timeout_ms(durations: dict[int, int]) -> DurationCluster:
    """The durations' cluster at their median, and whether it is the router's timeout."""
    median = hist_quantile(durations, 0.5)
    total = sum(durations.values())
    if median is None or total == 0:
        return DurationCluster(None, 0, 0.0, None)
    tolerance = max(CLUSTER_MIN_MS, CLUSTER_TOLERANCE * median)
    near = {ms: c for ms, c in durations.items() if abs(ms - median) <= tolerance}
    share = sum(near.values()) / total
    return DurationCluster(median if share >= CLUSTER_SHARE else None, sum(near.values()), share,
                           max((abs(ms - median) for ms in near), default=None))


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding with every timeout incident and the inferred timeout."""
    incidents = evidence.incidents_of(*LOGS_SIGNATURES)
    if not incidents:
        return []
    summary = incident_summary(incidents)
    durations = dict(evidence.signature_durations.get("upstream_timeout", {}))
    cluster = infer_timeout_ms(durations)
    timeout_ms = cluster.timeout_ms
    success_p99 = hist_quantile(evidence.success_hist, 0.99)
    count = int(str(summary["failures"]))
    title = f"{count} request{'s' if count != 1 else ''} timed out at the router"
    if timeout_ms is not None:
        title += f" after ~{timeout_ms / 1000:.2f} s (inferred router timeout)"
    fix = None
    if timeout_ms is not None:
        fix = (f"The router's timeout looks like ~{timeout_ms / 1000:.2f} s. Raise it (nginx proxy_read_timeout, "
               "Envoy route timeout, HAProxy timeout server) above the backend's p99 at the expected load, or make "
               "the backend faster; do not retry timed-out non-idempotent requests.")
    return [RULE.finding(
            title, {
        "source": "logs",
        "inferred_timeout_ms": timeout_ms,
        **summary,
        "clustered_errors": cluster.near,
        "cluster_share": round(cluster.share, 3),
        "spread_ms": cluster.spread_ms,
        "timed_requests": sum(durations.values()),
        "success_p99_ms": success_p99,
        "success_n": evidence.success_n,
    }, fix=fix, impact=min(1.0, count / evidence.requests) if evidence.requests else None,
        location=largest_file(incidents))]


LOGS_SIGNATURES = ("upstream_timeout", "upstream_max_stream_duration")
"""The log signatures of this code: the router's upstream timeout, and Envoy's max stream duration (``UMSDR``)."""
