"""R009 router-queueing, from router logs.

What it detects:
    Requests waiting inside the router: HAProxy queue time (``Tw``) large and growing minute over minute, and
    requests rejected by a full queue or circuit breaker (Envoy ``UO``, HAProxy ``sQ``).

Why it matters:
    Queueing in the router adds latency before a backend even sees the request; when it grows over time, the
    backends cannot keep up with the offered load and the queue will end in timeouts.

How it is measured:
    Mean ``Tw`` per minute; the finding fires when the worst minute's mean reaches :data:`QUEUE_MS` (50 ms) and the last
    third of the minutes averages at least :data:`GROWTH` (2) times the first third (or the overflow signature occurs).

Fix:
    Add backend capacity or replicas, or raise per-server maxconn / circuit-breaker limits in step with what each
    backend can serve; shed load early (429 with Retry-After) instead of queueing without bound.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence, iso
from infradoctor.logs.incidents import LogsRuleOptions, incident_summary

RULE = Rule(
    "R009",
    "router-queueing",
    Severity.MEDIUM,
    "Requests queue inside the router",
    fix="Raise backend maxconn/capacity or add backends; shed load early.",
    risk="More in-flight requests per backend raise its latency.",
    commands=("logs",),
)
QUEUE_MS = 50.0
"""Mean queue time in the worst minute at or above which queueing matters."""
GROWTH = 2.0
"""Last third over first third of the minutes' mean queue time that counts as growing."""


@RULE.check(LogsEvidence, LogsRuleOptions)
def check(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """Queue growth from HAProxy Tw and overflow incidents."""
    findings = []
    minutes = evidence.queue_by_minute
    if minutes and sum(m[1] for m in minutes) >= options.min_requests:
        worst = max(minutes, key=lambda m: m[2])
        third = max(1, len(minutes) // 3)
        first = _mean(minutes[:third])
        last = _mean(minutes[-third:])
        growing = len(minutes) >= 3 and last >= GROWTH * max(first, 1.0)
        if worst[2] >= QUEUE_MS and (growing or len(minutes) < 3):
            findings.append(RULE.finding(
            f"Router queue time reached {worst[2]:.0f} ms mean in a minute"
                + (f", growing from {first:.0f} to {last:.0f} ms" if growing else ""),
                {"worst_minute": iso(worst[0] * 60), "worst_mean_queue_ms": round(worst[2], 1),
                 "worst_max_queue_ms": worst[3], "first_third_mean_ms": round(first, 1),
                 "last_third_mean_ms": round(last, 1), "minutes": len(minutes), "growing": growing},
            ))
    overflow = evidence.incidents_of("upstream_overflow")
    if overflow:
        summary = incident_summary(overflow)
        findings.append(RULE.finding(
            f"{summary['count']} requests rejected by a full queue or circuit breaker",
                                     summary))
    return findings


def _mean(minutes: tuple[tuple[int, int, float, int], ...]) -> float:
    requests = sum(m[1] for m in minutes)
    return sum(m[1] * m[2] for m in minutes) / requests if requests else 0.0
