"""S005 cold-start-latency: the first requests are much slower than the steady state.

What it detects:
    One of the first ``FIRST_WINDOW`` (5) requests of the run takes at least ``RATIO`` (5x) the median latency of
    the first point and ``MIN_EXCESS_MS`` (50 ms) more, and it is not part of the normal tail: the point's p90 is
    below half of it (fewer than 10% of requests are anywhere near that slow).

Why it matters:
    Lazy model loading, JIT compilation, cache warm-up or connection set-up done on the first request make the
    first users after every deploy, scale-out or restart wait, and can trip health checks and client timeouts.

How it is measured:
    From ``first_latencies_ms`` of the first (lowest-load) non-saturated point: ``slowest_first >= 5 * p50``,
    ``slowest_first - p50 >= 50 ms`` and ``p90 < slowest_first / 2``.

Fix:
    Load and warm up the model at start-up (run a few dummy requests in the lifespan/startup hook) and gate
    readiness on it, so that traffic arrives only at a warm server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.load.evidence import LoadEvidence

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


@RULE.check(LoadEvidence, None)
def check(evidence: LoadEvidence, options: Mapping[str, Any] | None = None) -> list[Finding]:
    """S005 when the first requests stand out from the first point's steady state."""
    points = evidence.valid_points
    if not points:
        return []
    first = min(points, key=lambda p: p.level)
    firsts = list(first.first_latencies_ms[:FIRST_WINDOW])
    if not firsts or not first.p50_ms > 0:
        return []
    slowest = max(firsts)
    steady = first.p50_ms
    if slowest < RATIO * steady or slowest - steady < MIN_EXCESS_MS or not first.p90_ms < slowest / 2:
        return []
    return [
        RULE.finding(
            f"The first requests took up to {slowest:.0f} ms; steady state median is {steady:.1f} ms "
            f"({slowest / steady:.0f}x)",
            {
                "first_latencies_ms": [round(v, 3) for v in firsts],
                "slowest_first_ms": round(slowest, 3),
                "steady_p50_ms": round(steady, 3),
                "steady_p90_ms": round(first.p90_ms, 3),
                "ratio": round(slowest / steady, 2),
                "point": first.label,
            },
        )
    ]
