"""The knee of a load sweep: the last load level that still bought throughput before latency took off.

Definition (used by rule S008 and ``metrics.knee``): walk the points in order of offered load, using throughput
(successful responses per second) and the p99 latency of the successful responses. The knee is the first point
*i* whose next point *i+1* gains less than ``THROUGHPUT_GAIN`` (10%) throughput while its p99 grows by more than
``LATENCY_GROWTH`` (50%). The knee level lies between the levels of *i* and *i+1* (``level_range``); the point *i*
gives the load, throughput and p99 reported. When the points carry 95% confidence intervals for their p99 (order
statistics of the histogram, :meth:`~infradoctor.load.histogram.Histogram.quantile_ci_us`), the rise must also
clear them: the next point's interval lies wholly above the knee's, so sampling noise cannot make a knee. Points
get intervals only when they hold enough responses (about 800 and more) for the interval's top not to be simply
their slowest one: with fewer, one cold request would decide, and the rule goes without intervals and says so
("beyond noise" is claimed only with them; ``metrics.knee`` gives the n behind each p99). Points where the load
generator saturated are skipped; no knee is reported when none qualifies. ``metrics.knee`` carries both intervals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infradoctor.load.metrics import KneeMetrics

THROUGHPUT_GAIN = 0.10
"""Past the knee the next level adds less than this fraction of throughput."""
LATENCY_GROWTH = 0.50
"""... while its p99 grows by more than this fraction."""


@dataclass(frozen=True)
class CurvePoint:
    """One point of the throughput-latency curve."""

    level: float
    """Offered load (concurrency or rate)."""
    throughput_rps: float
    """Successful responses per second."""
    p99_ms: float
    """p99 latency of the successful responses."""
    error_rate: float = 0.0
    """Failed / completed requests."""
    p99_ci_ms: tuple[float, float] | None = None
    """95% confidence interval of the p99, when known."""
    p99_n: int = 0
    """Successful responses behind the p99."""


@dataclass(frozen=True)
class Knee:
    """Where latency starts rising without throughput."""

    index: int
    """Index of the knee point in the curve given."""
    level: float
    """Offered load at the knee."""
    throughput_rps: float
    """Throughput at the knee."""
    p99_ms: float
    """p99 at the knee."""
    next_level: float
    """The next level, where the gain stopped."""
    next_throughput_rps: float
    """Throughput at the next level."""
    next_p99_ms: float
    """p99 at the next level."""
    throughput_gain: float
    """Relative throughput gain from the knee to the next level."""
    latency_growth: float
    """Relative p99 growth from the knee to the next level."""
    p99_ci_ms: tuple[float, float] | None = None
    """95% interval of the p99 at the knee."""
    next_p99_ci_ms: tuple[float, float] | None = None
    """95% interval of the p99 at the next level (wholly above the knee's when both are known)."""
    p99_n: int = 0
    """Successful responses behind the knee's p99."""
    next_p99_n: int = 0
    """Successful responses behind the next level's p99."""

    @property
    def beyond_noise(self) -> bool:
        """Both points had enough responses for p99 intervals, and the rise cleared them."""
        return self.p99_ci_ms is not None and self.next_p99_ci_ms is not None

    def rule_text(self) -> str:
        """The definition as applied, in words."""
        text = f"next level gains < {THROUGHPUT_GAIN:.0%} throughput while p99 grows > {LATENCY_GROWTH:.0%}"
        if self.beyond_noise:
            return text + ", beyond both p99 95% intervals"
        return text + (f"; p99s from {self.p99_n} and {self.next_p99_n} responses, too few for 95% intervals "
                       "(not judged against noise)")

    def metrics(self, kind: str) -> KneeMetrics:
        """``metrics.knee``; ``kind`` is ``concurrency`` or ``rate``."""
        from infradoctor.load.metrics import KneeMetrics, KneeSide

        return KneeMetrics(
            kind="rate" if kind == "rate" else "concurrency",
            level=self.level,
            concurrency=self.level if kind != "rate" else None,
            rate=self.level if kind == "rate" else None,
            throughput_rps=round(self.throughput_rps, 3),
            p99_ms=round(self.p99_ms, 3),
            p99_n=self.p99_n,
            level_range=(self.level, self.next_level),
            p99_ci_ms=_ci(self.p99_ci_ms),
            next=KneeSide(
                level=self.next_level,
                throughput_rps=round(self.next_throughput_rps, 3),
                p99_ms=round(self.next_p99_ms, 3),
                p99_n=self.next_p99_n,
                p99_ci_ms=_ci(self.next_p99_ci_ms),
            ),
            throughput_gain=round(self.throughput_gain, 4),
            latency_growth=round(self.latency_growth, 4),
            rule=self.rule_text(),
        )


def _ci(interval: tuple[float, float] | None) -> tuple[float, float] | None:
    return (round(interval[0], 3), round(interval[1], 3)) if interval is not None else None


def _separated(here: CurvePoint, after: CurvePoint) -> bool:
    """The next p99 lies beyond the knee's interval (True when either interval is unknown)."""
    if here.p99_ci_ms is None or after.p99_ci_ms is None:
        return True
    return after.p99_ci_ms[0] > here.p99_ci_ms[1]


def find_knee(points: Sequence[CurvePoint]) -> Knee | None:
    """The knee by the module's definition, or None."""
    ordered = sorted(
        (i, p) for i, p in enumerate(points) if math.isfinite(p.p99_ms) and p.p99_ms > 0 and p.throughput_rps >= 0
    )
    ordered.sort(key=lambda item: item[1].level)
    for (index, here), (_, after) in zip(ordered, ordered[1:], strict=False):
        if here.throughput_rps <= 0:
            continue
        gain = after.throughput_rps / here.throughput_rps - 1.0
        growth = after.p99_ms / here.p99_ms - 1.0
        if gain < THROUGHPUT_GAIN and growth > LATENCY_GROWTH and _separated(here, after):
            return Knee(
                index=index,
                level=here.level,
                throughput_rps=here.throughput_rps,
                p99_ms=here.p99_ms,
                next_level=after.level,
                next_throughput_rps=after.throughput_rps,
                next_p99_ms=after.p99_ms,
                throughput_gain=gain,
                latency_growth=growth,
                p99_ci_ms=here.p99_ci_ms,
                next_p99_ci_ms=after.p99_ci_ms,
                p99_n=here.p99_n,
                next_p99_n=after.p99_n,
            )
    return None
