"""The knee of a load sweep: the last load level that still bought throughput before latency took off.

Definition (used by rule S008 and ``metrics.knee``): walk the points in order of offered load, using goodput
(successful responses per second) and p99 latency. The knee is the first point *i* whose next point *i+1* gains
less than ``THROUGHPUT_GAIN`` (10%) goodput while its p99 grows by more than ``LATENCY_GROWTH`` (50%). The knee
level lies between the levels of *i* and *i+1* (``level_range``); the point *i* gives the load, throughput and
p99 reported. Points where the load generator saturated are skipped; no knee is reported when none qualifies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

THROUGHPUT_GAIN = 0.10
"""Past the knee the next level adds less than this fraction of goodput."""
LATENCY_GROWTH = 0.50
"""... while its p99 grows by more than this fraction."""


@dataclass(frozen=True)
class CurvePoint:
    """One point of the throughput-latency curve."""

    level: float
    """Offered load (concurrency or rate)."""
    goodput_rps: float
    """Successful responses per second."""
    p99_ms: float
    """p99 latency."""
    error_rate: float = 0.0
    """Failed / finished requests."""


@dataclass(frozen=True)
class Knee:
    """Where latency starts rising without throughput."""

    index: int
    """Index of the knee point in the curve given."""
    level: float
    """Offered load at the knee."""
    throughput_rps: float
    """Goodput at the knee."""
    p99_ms: float
    """p99 at the knee."""
    next_level: float
    """The next level, where the gain stopped."""
    next_throughput_rps: float
    """Goodput at the next level."""
    next_p99_ms: float
    """p99 at the next level."""
    throughput_gain: float
    """Relative goodput gain from the knee to the next level."""
    latency_growth: float
    """Relative p99 growth from the knee to the next level."""

    def to_dict(self, kind: str) -> dict[str, Any]:
        """``metrics.knee``; ``kind`` is ``concurrency`` or ``rate``."""
        return {
            "kind": kind,
            "level": self.level,
            kind: self.level,
            "throughput_rps": round(self.throughput_rps, 3),
            "p99_ms": round(self.p99_ms, 3),
            "level_range": [self.level, self.next_level],
            "next": {
                "level": self.next_level,
                "throughput_rps": round(self.next_throughput_rps, 3),
                "p99_ms": round(self.next_p99_ms, 3),
            },
            "throughput_gain": round(self.throughput_gain, 4),
            "latency_growth": round(self.latency_growth, 4),
            "rule": f"next level gains < {THROUGHPUT_GAIN:.0%} goodput while p99 grows > {LATENCY_GROWTH:.0%}",
        }


def find_knee(points: Sequence[CurvePoint]) -> Knee | None:
    """The knee by the module's definition, or None."""
    ordered = sorted(
        (i, p) for i, p in enumerate(points) if math.isfinite(p.p99_ms) and p.p99_ms > 0 and p.goodput_rps >= 0
    )
    ordered.sort(key=lambda item: item[1].level)
    for (index, here), (_, after) in zip(ordered, ordered[1:], strict=False):
        if here.goodput_rps <= 0:
            continue
        gain = after.goodput_rps / here.goodput_rps - 1.0
        growth = after.p99_ms / here.p99_ms - 1.0
        if gain < THROUGHPUT_GAIN and growth > LATENCY_GROWTH:
            return Knee(
                index=index,
                level=here.level,
                throughput_rps=here.goodput_rps,
                p99_ms=here.p99_ms,
                next_level=after.level,
                next_throughput_rps=after.goodput_rps,
                next_p99_ms=after.p99_ms,
                throughput_gain=gain,
                latency_growth=growth,
            )
    return None
