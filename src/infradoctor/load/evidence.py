"""Evidence the load rules read, built from ``metrics`` (so the same rules run on live and on recorded results)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infradoctor.load.taxonomy import REJECTION_CLASSES

if TYPE_CHECKING:
    from infradoctor.load.metrics import LoadMetrics, PointMetrics


@dataclass(frozen=True)
class PointEvidence:
    """One load level, as the rules see it."""

    label: str
    """``c=8`` or ``r=100``."""
    mode: str
    """``closed`` or ``open``."""
    level: float
    """Offered load: concurrency or rate."""
    completed: int
    """Completed requests (successes and failures)."""
    throughput_rps: float
    """Successful responses per second."""
    completed_rps: float
    """Completed requests per second (whether the server kept up with the offered load)."""
    p50_ms: float
    """Median latency of the successful responses."""
    p99_ms: float
    """p99 latency of the successful responses."""
    p90_ms: float
    """p90 latency of the successful responses."""
    error_rate: float
    """Failed / completed."""
    errors: Mapping[str, int]
    """Failures by class."""
    saturated: bool
    """The generator was the bottleneck (excluded from verdicts)."""
    saturation_reason: str | None = None
    """Why it was flagged saturated."""
    client_cpu_fraction: float | None = None
    """Event-loop thread CPU / wall."""
    first_latencies_ms: Sequence[float] = ()
    """First successful responses' latencies in completion order."""
    window_means_ms: Sequence[float] = ()
    """Mean latency of the successful responses per 1 s window (windows without any left out)."""
    ok_max_ms: float = math.nan
    """Slowest successful response."""
    unsent: int = 0
    """Open loop: requests never sent because the client queue did not drain."""
    interrupted: bool = False
    """Cut short by Ctrl-C."""
    order: int = 0
    """Position in the run (0: the first point run, the client's first contact with the server in this run)."""
    p95_ms: float = math.nan
    """p95 latency of the successful responses."""
    p99_9_ms: float = math.nan
    """p99.9 latency of the successful responses."""

    def latency_at(self, percentile: float) -> float:
        """The successful responses' latency at ``percentile`` (50, 90, 95, 99, 99.9); NaN for any other."""
        known = {50.0: self.p50_ms, 90.0: self.p90_ms, 95.0: self.p95_ms, 99.0: self.p99_ms, 99.9: self.p99_9_ms}
        return known.get(float(percentile), math.nan)

    @property
    def rejections(self) -> int:
        """Requests the server shed on purpose (429, 503)."""
        return sum(self.errors.get(name, 0) for name in REJECTION_CLASSES)

    @property
    def read_timeouts(self) -> int:
        """Requests that hit the client timeout."""
        return int(self.errors.get("read_timeout", 0))


@dataclass(frozen=True)
class SloEvidence:
    """The objective the user gave (``--slo``), as stored in ``metrics.slo``."""

    text: str
    """As written, e.g. ``p99<500ms``."""
    percentile: float
    """Percentile the latency bound applies to."""
    max_ms: float
    """Latency bound."""
    max_error_rate: float
    """Failed share allowed."""

    def broken_by(self, point: PointEvidence) -> str | None:
        """Why ``point`` breaks the objective (``p99 812 ms > 500 ms``), or None when it meets it or cannot tell."""
        latency = point.latency_at(self.percentile)
        if math.isfinite(latency) and latency > self.max_ms:
            return f"p{self.percentile:g} {latency:.4g} ms > {self.max_ms:g} ms"
        if point.error_rate > self.max_error_rate:
            return f"errors {point.error_rate:.1%} > {self.max_error_rate:.1%}"
        return None


@dataclass(frozen=True)
class LoadEvidence:
    """A whole load run: the points, the knee and the settings that matter to the rules."""

    mode: str
    """``closed`` or ``open``."""
    points: Sequence[PointEvidence] = field(default_factory=tuple)
    """Points in order of offered load."""
    knee: Mapping[str, Any] | None = None
    """``metrics.knee`` (None when no knee)."""
    timeout_s: float = math.nan
    """Client timeout."""
    slo: SloEvidence | None = None
    """The user's objective (``--slo``), where the run recorded one."""

    @property
    def valid_points(self) -> list[PointEvidence]:
        """Points fit for verdicts: not generator-saturated, not interrupted, with completed requests."""
        return [p for p in self.points if not p.saturated and not p.interrupted and p.completed > 0]

    @classmethod
    def from_metrics(cls, metrics: LoadMetrics | Mapping[str, Any]) -> LoadEvidence:
        """Evidence from a ``load`` result's metrics (typed, or their JSON form)."""
        from infradoctor.load.metrics import LoadMetrics

        typed = metrics if isinstance(metrics, LoadMetrics) else LoadMetrics.from_dict(metrics)
        points = sorted((point_evidence(p, order) for order, p in enumerate(typed.points)), key=lambda p: p.level)
        timeout = typed.settings.timeout_s
        slo = typed.slo
        return cls(
            mode=typed.mode,
            points=tuple(points),
            knee=typed.knee.to_dict() if typed.knee is not None else None,
            timeout_s=float(timeout) if timeout is not None else math.nan,
            slo=SloEvidence(slo.text, slo.percentile, slo.max_ms, slo.max_error_rate) if slo is not None else None,
        )


def _num(value: float | None, default: float = math.nan) -> float:
    return float(value) if value is not None else default


def point_evidence(point: PointMetrics, order: int = 0) -> PointEvidence:
    """A ``metrics.points[]`` entry as evidence; ``order`` is its position in the run (``metrics.points`` order)."""
    latency = point.latency_ms
    return PointEvidence(
        label=point.label,
        mode=point.mode,
        level=point.offered,
        completed=point.completed,
        throughput_rps=point.throughput_rps,
        completed_rps=point.completed_rps if point.completed_rps is not None else point.throughput_rps,
        p50_ms=_num(latency.p50),
        p99_ms=_num(latency.p99),
        p90_ms=_num(latency.p90),
        error_rate=point.error_rate,
        errors=dict(point.errors),
        saturated=point.saturated,
        saturation_reason=point.saturation_reason,
        client_cpu_fraction=point.client_cpu_fraction,
        first_latencies_ms=tuple(point.first_latencies_ms),
        window_means_ms=tuple(w.mean_ms for w in point.windows if w.mean_ms is not None),
        ok_max_ms=_num(latency.max),
        unsent=point.unsent,
        interrupted=point.interrupted,
        order=order,
        p95_ms=_num(latency.p95),
        p99_9_ms=_num(latency.p99_9),
    )
