"""S005 cold-start-latency: the first requests are much slower than the steady state.

What it detects:
    At the run's first point (the client's first contact with the server), one of the first ``FIRST_WINDOW`` (5)
    requests takes at least ``RATIO`` (5x) the point's median latency and ``MIN_EXCESS_MS`` (50 ms) more, and it is
    not part of the normal tail: the point's p90 is below half of it (fewer than 10% of requests are anywhere near
    that slow). A server that was cold pays once: when a later point, whose new connections reach a server that has
    by then answered this client, starts just as slowly against its own median, the slow start comes with new
    connections or with the client (TLS handshakes, connection set-up, a backlog), not with a cold server, and
    nothing is reported.

Why it matters:
    Lazy model loading, JIT compilation, cache warm-up or connection set-up done on the first request make the
    first users after every deploy, scale-out or restart wait, and can trip health checks and client timeouts.

How it is measured:
    From ``first_latencies_ms`` of the first point in run order (``metrics.points[0]``), when it is fit for
    verdicts (not generator-saturated, not interrupted): ``slowest_first >= 5 * p50``,
    ``slowest_first - p50 >= 50 ms`` and ``p90 < slowest_first / 2``. Every later point is put to the same test;
    one that passes it too silences the finding. Other points are never judged on their own: by then the server
    has answered this client, so a slow first request there is not a cold start (a lower level run later, as in
    an ``--rate auto`` search that bisects downwards, starts behind what the overloaded point before it left
    queued). A load run cannot see what other clients or earlier runs sent: it judges the first contact it made
    itself, against what its own later contacts show.

Fix:
    Load and warm up the model at start-up (run a few dummy requests in the lifespan/startup hook) and gate
    readiness on it, so that traffic arrives only at a warm server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.load.evidence import LoadEvidence, PointEvidence

RULE = Rule(
    "S005",
    "cold-start-latency",
    Severity.MEDIUM,
    "First requests are much slower than the rest",
    fix="Load and warm up the model at start-up and gate readiness on it.",
    risk="Start-up takes longer; readiness must reflect it.",
    commands=("load", "profile"),
)
FIRST_WINDOW = 5
"""How many of the first requests are examined."""
RATIO = 5.0
"""Slowest first request / steady median at or above this is a cold start."""
MIN_EXCESS_MS = 50.0
"""... and it must be at least this much slower in absolute terms."""


def _slow_start(point: PointEvidence) -> float | None:
    """The slowest of the point's first requests when they stand out from its steady state, else None."""
    firsts = list(point.first_latencies_ms[:FIRST_WINDOW])
    if not firsts or not point.p50_ms > 0:
        return None
    slowest = max(firsts)
    steady = point.p50_ms
    if slowest < RATIO * steady or slowest - steady < MIN_EXCESS_MS or not point.p90_ms < slowest / 2:
        return None
    return slowest


@RULE.check(LoadEvidence, None)
def check(evidence: LoadEvidence, options: Mapping[str, Any] | None = None) -> list[Finding]:
    """S005 when the first contact's first requests stand out and later points' first requests do not."""
    if not evidence.points:
        return []
    contact = min(evidence.points, key=lambda p: p.order)
    valid = evidence.valid_points
    if contact not in valid:
        return []
    slowest = _slow_start(contact)
    if slowest is None:
        return []
    if any(_slow_start(p) is not None for p in valid if p.order > contact.order):
        return []
    firsts = list(contact.first_latencies_ms[:FIRST_WINDOW])
    steady = contact.p50_ms
    return [
        RULE.finding(
            f"The first requests took up to {slowest:.0f} ms; steady state median is {steady:.1f} ms "
            f"({slowest / steady:.0f}x)",
            {
                "first_latencies_ms": [round(v, 3) for v in firsts],
                "slowest_first_ms": round(slowest, 3),
                "steady_p50_ms": round(steady, 3),
                "steady_p90_ms": round(contact.p90_ms, 3),
                "ratio": round(slowest / steady, 2),
                "point": contact.label,
            },
        )
    ]
