"""S008 knee: past this load level latency rises while throughput does not.

What it detects:
    The knee of the throughput-latency curve of a sweep, defined precisely in :mod:`infradoctor.load.knee`: the
    first point *i* (by offered load) whose next point gains less than 10% throughput (successful responses per
    second) while its p99 grows by more than 50%, and the next point's p99 95% confidence interval lies wholly
    above point *i*'s (so the rise is not sampling noise; applied to points of about 800 requests and more, where
    the interval is not simply bounded by the slowest request). The knee lies between the two levels; point *i* gives
    the load, throughput, p99 and its interval reported.

Why it matters:
    The knee is the service's usable capacity: below it, more load buys more throughput at similar latency;
    above it, more load only buys queueing. Autoscaling targets, admission limits and router ``maxconn`` belong at
    or just below it.

How it is measured:
    From ``metrics.knee``, computed over the points where the load generator was not saturated (S009). At least
    two levels are needed; a sweep that never flattens has no knee (``metrics.knee`` is null).

Fix:
    Keep the offered load below the knee (autoscale or admission control at that level) or raise capacity
    (batching, more replicas, a faster model) and sweep again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.load.evidence import LoadEvidence

RULE = Rule(
    "S008",
    "knee",
    Severity.INFO,
    "Latency knee: past this load latency rises while throughput does not",
    fix="Keep offered load below the knee (autoscale or admission control there), or raise capacity.",
    risk="Running near the knee leaves little headroom for bursts.",
    commands=("load", "profile"),
)


@RULE.check(LoadEvidence, None)
def check(evidence: LoadEvidence, options: Mapping[str, Any] | None = None) -> list[Finding]:
    """S008 from ``metrics.knee``."""
    knee = evidence.knee
    if not knee:
        return []
    kind = str(knee.get("kind", "concurrency"))
    level = float(knee.get("level", 0.0))
    nxt = knee.get("next") or {}
    unit = "concurrency" if kind == "concurrency" else "req/s"
    return [
        RULE.finding(
            f"Knee at {unit} {level:g}: {_num(knee.get('throughput_rps'))} req/s, p99 {_num(knee.get('p99_ms'))} ms; "
            f"at {_num(nxt.get('level'))} p99 is {_num(nxt.get('p99_ms'))} ms for "
            f"{float(knee.get('throughput_gain', 0.0)):+.0%} throughput",
            dict(knee),
        )
    ]


def _num(value: Any) -> str:
    """Four significant digits, as the tables show them (1351, 4.89, 232.6)."""
    return f"{float(value):.4g}" if isinstance(value, (int, float)) else "?"
