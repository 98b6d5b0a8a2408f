"""S003 no-backpressure: overload queues without bound instead of being rejected.

What it detects:
    Past the knee (or beyond the service's capacity in the open loop) latency keeps growing with the offered load
    or with time, while the service rejects almost nothing (fewer than 1% 429/503 responses). It is high only when
    that queueing hurts: a point past the knee breaks the user's objective (``--slo``), has requests that hit the
    client timeout, or has ``ERROR_RATE`` (1%) or more failures. Otherwise it is low, with the numbers: in a
    closed loop, latency always grows with the number of clients once the service is saturated, because each
    client waits behind the others; that is queueing behind a bounded number of clients, not proof that nothing
    limits admission.

Why it matters:
    A service without admission control accepts every request and queues it. Under overload every user waits
    longer and longer, requests time out client-side after the server has already spent work on them, and the
    service recovers slowly when the load drops. Rejecting early (429/503 with Retry-After) keeps latency bounded
    for the requests it accepts and lets clients and routers back off or retry elsewhere.

How it is measured:
    Closed loop: with a knee at level K (rule S008) and a later non-saturated point at level L, the median latency
    grows at least ``LATENCY_SHARE`` (60%) as fast as the load (``p50_L / p50_K >= 0.6 * L / K``, the Little's-law
    signature of a queue) and by at least ``MIN_GROWTH_MS`` (1 ms), while rejections stay below
    ``MAX_REJECTION_RATE`` (1%). A service whose median at the lowest load is under ``MIN_SERVICE_P50_MS`` (1 ms)
    is not judged (a ``/health`` or metrics endpoint): at sub-millisecond service times the client and the TCP
    stack, not the service, set the pace (as in S001), the knee is the machine's, and the growth past it is
    requests waiting behind the generator's own clients (measured: a ``/health`` endpoint answered in 0.18 ms at
    concurrency 1 and 8.9 ms at 16 on a 2-core machine shared with the client).
    Open loop: a point that completes fewer than ``MIN_ACHIEVED`` (90%) of the offered requests per second, whose
    mean latency in its last 1 s window is at least ``GROWTH`` (2x) that of its first window, with rejections below
    1%. Arrivals there do not wait for answers, so growth over time is a queue without bound whatever the service
    time.
    Severity: high when a point past the knee (open loop: the overloaded point) breaks the ``--slo`` stored with
    the run (``metrics.slo``: its latency percentile or error ceiling, stored with open- and closed-loop runs
    alike; without one a sweep is judged on timeouts and errors alone), has read timeouts, or fails
    ``ERROR_RATE`` (1%) or more of its requests; low otherwise.

Fix:
    Bound in-flight work (a semaphore or the server's concurrency limit, e.g. ``--limit-concurrency`` in uvicorn,
    ``maxconn`` in HAProxy) and return 429/503 with ``Retry-After`` beyond it; size the limit at the knee.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.load.evidence import LoadEvidence, PointEvidence, SloEvidence

RULE = Rule(
    "S003",
    "no-backpressure",
    Severity.LOW,
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
MIN_SERVICE_P50_MS = 1.0
"""Closed loop: a service whose median at the lowest load is under this is not judged (client and TCP set the
pace)."""
GROWTH = 2.0
"""Open loop: last-window mean latency / first-window mean latency at or above this is growth without bound."""
ERROR_RATE = 0.01
"""A point past the knee failing at least this share of its requests makes the finding high."""


def _rejection_rate(point: PointEvidence) -> float:
    return point.rejections / point.completed if point.completed else 0.0


def _harm(points: Sequence[PointEvidence], slo: SloEvidence | None) -> dict[str, Any]:
    """What the queueing cost at ``points``: the SLO broken, read timeouts, errors (empty when nothing)."""
    harm: dict[str, Any] = {}
    if slo is not None:
        broken = {p.label: why for p in points if (why := slo.broken_by(p)) is not None}
        if broken:
            harm["slo_broken"] = {"slo": slo.text, **broken}
    timeouts = sum(p.read_timeouts for p in points)
    if timeouts:
        harm["read_timeouts"] = timeouts
    failing = [p for p in points if p.error_rate >= ERROR_RATE]
    if failing:
        harm["error_rate"] = round(max(p.error_rate for p in failing), 5)
    return harm


def _severity_and_words(harm: Mapping[str, Any], closed: bool) -> tuple[Severity, str]:
    if not harm:
        if closed:
            return Severity.LOW, "; no timeouts, errors or broken SLO: queueing behind a bounded number of clients"
        return Severity.LOW, "; no timeouts, errors or broken SLO yet"
    said = []
    if "slo_broken" in harm:
        said.append(f"the SLO {harm['slo_broken']['slo']} is broken")
    if "read_timeouts" in harm:
        said.append(f"{harm['read_timeouts']} requests timed out")
    if "error_rate" in harm:
        said.append(f"{harm['error_rate']:.1%} of requests failed")
    return Severity.HIGH, "; " + ", ".join(said)


@RULE.check(LoadEvidence, None)
def check(evidence: LoadEvidence, options: Mapping[str, Any] | None = None) -> list[Finding]:
    """S003 when latency grows past capacity and nothing is rejected; high only when it hurts."""
    points = evidence.valid_points
    if evidence.mode == "closed":
        return _closed(evidence, points)
    for point in points:
        if point.level <= 0 or point.completed_rps >= MIN_ACHIEVED * point.level:
            continue
        means = point.window_means_ms
        if len(means) < 2 or means[0] <= 0:
            continue
        growth = means[-1] / means[0]
        if growth < GROWTH or _rejection_rate(point) >= MAX_REJECTION_RATE:
            continue
        harm = _harm([point], evidence.slo)
        severity, words = _severity_and_words(harm, closed=False)
        return [
            RULE.finding(
                f"At {point.level:g} req/s offered the service completes {point.completed_rps:.1f} req/s and "
                f"latency grows {growth:.1f}x during the point without rejecting requests{words}",
                {
                    "offered_rps": point.level,
                    "completed_rps": round(point.completed_rps, 3),
                    "throughput_rps": round(point.throughput_rps, 3),
                    "first_window_mean_ms": round(means[0], 3),
                    "last_window_mean_ms": round(means[-1], 3),
                    "growth": round(growth, 3),
                    "rejection_rate": round(_rejection_rate(point), 5),
                    "unsent": point.unsent,
                    **harm,
                },
                severity=severity,
            )
        ]
    return []


def _closed(evidence: LoadEvidence, points: Sequence[PointEvidence]) -> list[Finding]:
    knee = evidence.knee
    if not knee or not points or points[0].p50_ms < MIN_SERVICE_P50_MS:
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
    harm = _harm(beyond, evidence.slo)
    severity, words = _severity_and_words(harm, closed=True)
    return [
        RULE.finding(
            f"Past the knee at concurrency {base.level:g}, median latency grows {latency_ratio:.1f}x "
            f"({base.p50_ms:.3g} -> {last.p50_ms:.3g} ms) for {load_ratio:.1f}x the load and only {rejection:.1%} "
            f"of requests are rejected{words}",
            {
                "knee_level": base.level,
                "last_level": last.level,
                "knee_p50_ms": round(base.p50_ms, 3),
                "last_p50_ms": round(last.p50_ms, 3),
                "latency_ratio": round(latency_ratio, 3),
                "load_ratio": round(load_ratio, 3),
                "rejection_rate": round(rejection, 5),
                **harm,
            },
            severity=severity,
        )
    ]
