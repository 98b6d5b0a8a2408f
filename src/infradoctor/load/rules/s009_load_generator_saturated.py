"""S009 load-generator-saturated: the load generator, not the server, limited some points.

What it detects:
    Points where infradoctor's own event loop used at least 85% of a CPU core
    (``point.SATURATED_CPU_FRACTION``), or, in the open loop, where the pacer ran behind its schedule for at
    least 10% of the requests (p90) by more than 10 ms and more than 10% of the point's median latency
    (``point.SATURATED_PACER_LAG_MS``, ``point.SATURATED_PACER_LAG_SHARE``).

Why it matters:
    A saturated client measures itself: throughput stops growing and latency includes time the requests spent
    waiting inside the client. Such points would fake a knee or a tail, so they are excluded from every other
    verdict.

How it is measured:
    CPU time of the engine's event-loop thread (``time.thread_time``) over the point's wall time, and the lag of
    each open-loop dispatch behind its intended time. ``infradoctor load --calibrate`` measures the generator's
    ceiling on this machine against a built-in null server.

Fix:
    Use fewer connections per process, run the generator on another machine or in several processes, or lower
    the offered load; re-run the flagged points.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.load.evidence import LoadEvidence

RULE = Rule(
    "S009",
    "load-generator-saturated",
    Severity.MEDIUM,
    "The load generator itself saturated",
    fix="Use fewer connections per process, more generator processes, or another machine for the client.",
    risk="Numbers at saturated points describe the client, not the server.",
    commands=("load", "profile"),
)


@RULE.check(LoadEvidence, None)
def check(evidence: LoadEvidence, options: Mapping[str, Any] | None = None) -> list[Finding]:
    """S009 listing the saturated points."""
    saturated = [p for p in evidence.points if p.saturated]
    if not saturated:
        return []
    labels = ", ".join(p.label for p in saturated)
    return [
        RULE.finding(
            f"The load generator saturated at {labels}; those points are excluded from the verdicts",
            {
                "points": [p.label for p in saturated],
                "reasons": {p.label: p.saturation_reason for p in saturated},
                "client_cpu_fraction": {p.label: p.client_cpu_fraction for p in saturated},
                "throughput_rps": {p.label: round(p.throughput_rps, 3) for p in saturated},
            },
        )
    ]
