"""S001 serialized-requests: the service handles one request at a time.

What it detects:
    In the closed loop, throughput stays flat from the lowest concurrency (1 or 2) to one at least
    ``MIN_LEVEL_RATIO`` (4) times higher, while latency grows with concurrency: requests wait in line for one
    another instead of being served in parallel.

Why it matters:
    A service that serialises requests cannot use more than one request's worth of its hardware: every added
    user adds a full service time of waiting. The usual cause is blocking work (model inference, file or network
    I/O) inside an ``async def`` endpoint, which stalls the event loop, or a single worker with a global lock.

How it is measured:
    Lowest-load point *a* and the highest non-saturated point *b* with ``level_b >= 4 * level_a``, both with an
    error rate below 1% and ``p50_a >= MIN_P50_MS`` (1 ms): S001 fires when
    ``throughput_b < MAX_SCALING * throughput_a`` (1.3x) and
    ``p50_b >= LATENCY_SHARE * (level_b / level_a) * p50_a`` (0.35: latency grows at least about a third as fast as
    concurrency; Little's law for a single server says as fast, but in a short point the first wave dominates:
    the c requests sent at once finish after 1, 2, ..., c service times, a median of about c/2, so a serialized
    service measured over a few dozen requests shows a ratio near half the concurrency ratio). Open-loop runs do
    not vary concurrency and are not judged.

    Severity: high when serving one at a time costs the users something the run can show: the high point breaks
    the ``--slo`` stored with the run or has read timeouts; otherwise medium, with the numbers (a serialized
    service whose latency still looks fine at the concurrency tested is a capacity ceiling, not yet an outage).

    On a busy machine the client itself leaves gaps between a response and the next request at concurrency 1
    (the server idles while the generator waits for a core), which lowers ``throughput_a`` and makes a serialized
    service look as if it scaled. So flat throughput is also read through Little's law: the requests the service
    holds at once at *b* are ``throughput_b * p50_a`` (the median at *a* is one request's time with nobody
    waiting); ``effective_parallelism < MAX_SCALING`` with ``throughput_b < CLIENT_GAP_SCALING * throughput_a``
    (1.6x) is one request at a time too. A service that runs two requests at once holds about 2.

Fix:
    Move blocking work off the event loop (``def`` endpoint so the framework uses its thread pool,
    ``await asyncio.to_thread(...)``, ``run_in_executor``), or run more workers / model replicas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.load.evidence import LoadEvidence

RULE = Rule(
    "S001",
    "serialized-requests",
    Severity.HIGH,
    "Requests are served one at a time",
    fix="Move blocking work off the event loop (def endpoint, asyncio.to_thread, run_in_executor) or add workers.",
    risk="Threads share the GIL; more workers each hold a model copy.",
    commands=("load", "profile"),
)
MIN_LEVEL_RATIO = 4.0
"""The compared concurrencies must differ by at least this factor."""
MAX_SCALING = 1.3
"""Throughput (successful responses per second) must grow by less than this factor over that range."""
CLIENT_GAP_SCALING = 1.6
"""With Little's law saying one request at a time, throughput may grow up to this factor (client gaps at c=1)."""
LATENCY_SHARE = 0.35
"""Median latency must grow at least this share of the concurrency ratio (below the first wave's 1/2)."""
MAX_ERROR_RATE = 0.01
"""Points with more failures than this are not compared."""
MIN_P50_MS = 1.0
"""Services answering in under this median at concurrency 1 are not judged: at sub-millisecond latency the
client and the TCP stack, not the service, set the pace."""


@RULE.check(LoadEvidence, None)
def check(evidence: LoadEvidence, options: Mapping[str, Any] | None = None) -> list[Finding]:
    """S001 when throughput stays flat while latency follows concurrency."""
    if evidence.mode != "closed":
        return []
    points = [p for p in evidence.valid_points if p.error_rate < MAX_ERROR_RATE and p.throughput_rps > 0]
    if len(points) < 2:
        return []
    low = points[0]
    if low.level > 2 or low.p50_ms < MIN_P50_MS:
        return []
    far = [p for p in points if p.level >= MIN_LEVEL_RATIO * low.level]
    if not far:
        return []
    high = far[-1]
    ratio = high.level / low.level
    scaling = high.throughput_rps / low.throughput_rps
    latency_ratio = high.p50_ms / low.p50_ms if low.p50_ms > 0 else 0.0
    parallelism = high.throughput_rps * low.p50_ms / 1000.0
    one_at_a_time = scaling < MAX_SCALING or (parallelism < MAX_SCALING and scaling < CLIENT_GAP_SCALING)
    if not one_at_a_time or latency_ratio < LATENCY_SHARE * ratio:
        return []
    slo_broken = evidence.slo.broken_by(high) if evidence.slo is not None else None
    harm = []
    if slo_broken:
        harm.append(f"the SLO {evidence.slo.text} is broken at concurrency {high.level:g}")  # type: ignore[union-attr]
    if high.read_timeouts:
        harm.append(f"{high.read_timeouts} requests timed out")
    return [
        RULE.finding(
            f"Throughput stays at {low.throughput_rps:.1f} -> {high.throughput_rps:.1f} req/s from concurrency "
            f"{low.level:g} to {high.level:g} while median latency grows {latency_ratio:.1f}x"
            + (f"; {', '.join(harm)}" if harm else ""),
            {
                "low_concurrency": low.level,
                "high_concurrency": high.level,
                "low_throughput_rps": round(low.throughput_rps, 3),
                "high_throughput_rps": round(high.throughput_rps, 3),
                "throughput_scaling": round(scaling, 3),
                "low_p50_ms": round(low.p50_ms, 3),
                "high_p50_ms": round(high.p50_ms, 3),
                "latency_ratio": round(latency_ratio, 3),
                "effective_parallelism": round(parallelism, 2),
                "high_p99_ms": round(high.p99_ms, 3),
                "read_timeouts": high.read_timeouts,
                "slo_broken": slo_broken,
            },
            severity=Severity.HIGH if harm else Severity.MEDIUM,
        )
    ]
