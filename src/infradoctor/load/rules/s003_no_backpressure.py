"""S003 no-backpressure: overload queues without bound instead of being rejected.

What it detects:
    Past the knee (or beyond the service's capacity in the open loop) latency keeps growing with the offered load
    or with time, while the service rejects almost nothing (fewer than 1% 429/503 responses).

Why it matters:
    A service without admission control accepts every request and queues it. Under overload every user waits
    longer and longer, requests time out client-side after the server has already spent work on them, and the
    service recovers slowly when the load drops. Rejecting early (429/503 with Retry-After) keeps latency bounded
    for the requests it accepts and lets clients and routers back off or retry elsewhere.

How it is measured:
    Closed loop: with a knee at level K (rule S008) and a later non-saturated point at level L, the median latency
    grows at least ``LATENCY_SHARE`` (60%) as fast as the load (``p50_L / p50_K >= 0.6 * L / K``, the Little's-law
    signature of an unbounded queue) and by at least ``MIN_GROWTH_MS`` (1 ms), while rejections stay below
    ``MAX_REJECTION_RATE`` (1%).
    Open loop: a point that completes fewer than ``MIN_ACHIEVED`` (90%) of the offered requests per second, whose
    mean latency in its last 1 s window is at least ``GROWTH`` (2x) that of its first window, with rejections below
    1%.

Fix:
    Bound in-flight work (a semaphore or the server's concurrency limit, e.g. ``--limit-concurrency`` in uvicorn,
    ``maxconn`` in HAProxy) and return 429/503 with ``Retry-After`` beyond it; size the limit at the knee.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.load.evidence import LoadEvidence, PointEvidence

RULE = Rule(
    "S003",
    "no-backpressure",
    Severity.HIGH,
    "Overload queues without bound instead of rejecting",
    fix="Limit in-flight requests (semaphore or server limit) and return 429/503 with Retry-After beyond it.",
    risk="A concurrency limit turns overload into 429s that clients must retry.",
    commands=("load", "profile"),
)
LATENCY_SHARE = 0.6
"""Closed loop: latency must grow at least this share of the load ratio past the knee."""
MAX_REJECTION_RATE = 0.01
"""More 429/503 than this share means the service does push back."""
MIN_ACHIEVED = 0.9
"""Open loop: a point is overloaded when it completes less than this share of the offered rate."""
MIN_GROWTH_MS = 1.0
"""Closed loop: the median must also grow by at least this much in absolute terms."""
GROWTH = 2.0
"""Open loop: last-window mean latency / first-window mean latency at or above this is growth without bound."""


def _rejection_rate(point: PointEvidence) -> float:
    return point.rejections / point.completed if point.completed else 0.0


@RULE.check(LoadEvidence, None)
def check(evidence: LoadEvidence, options: Mapping[str, Any] | None = None) -> list[Finding]:
    """S003 when latency grows past capacity and nothing is rejected."""
    points = evidence.valid_points
    if evidence.mode == "closed":
        knee = evidence.knee
        if not knee:
            return []
        knee_level = float(knee.get("level", 0.0))
        at_knee = [p for p in points if p.level == knee_level]
        beyond = [p for p in points if p.level > knee_level]
        if not at_knee or not beyond or at_knee[0].p50_ms <= 0:
            return []
        base, last = at_knee[0], beyond[-1]
        load_ratio = last.level / base.level
        latency_ratio = last.p50_ms / base.p50_ms
        rejection = max(_rejection_rate(p) for p in beyond)
        grown = last.p50_ms - base.p50_ms >= MIN_GROWTH_MS
        if latency_ratio < LATENCY_SHARE * load_ratio or rejection >= MAX_REJECTION_RATE or not grown:
            return []
        return [
            RULE.finding(
                f"Past the knee at concurrency {base.level:g}, median latency grows {latency_ratio:.1f}x for "
                f"{load_ratio:.1f}x the load and only {rejection:.1%} of requests are rejected",
                {
                    "knee_level": base.level,
                    "last_level": last.level,
                    "knee_p50_ms": round(base.p50_ms, 3),
                    "last_p50_ms": round(last.p50_ms, 3),
                    "latency_ratio": round(latency_ratio, 3),
                    "load_ratio": round(load_ratio, 3),
                    "rejection_rate": round(rejection, 5),
                },
            )
        ]
    for point in points:
        if point.level <= 0 or point.completed_rps >= MIN_ACHIEVED * point.level:
            continue
        means = point.window_means_ms
        if len(means) < 2 or means[0] <= 0:
            continue
        growth = means[-1] / means[0]
        if growth < GROWTH or _rejection_rate(point) >= MAX_REJECTION_RATE:
            continue
        return [
            RULE.finding(
                f"At {point.level:g} req/s offered the service completes {point.completed_rps:.1f} req/s and "
                f"latency grows {growth:.1f}x during the point without rejecting requests",
                {
                    "offered_rps": point.level,
                    "completed_rps": round(point.completed_rps, 3),
                    "throughput_rps": round(point.throughput_rps, 3),
                    "first_window_mean_ms": round(means[0], 3),
                    "last_window_mean_ms": round(means[-1], 3),
                    "growth": round(growth, 3),
                    "rejection_rate": round(_rejection_rate(point), 5),
                    "unsent": point.unsent,
                },
            )
        ]
    return []
