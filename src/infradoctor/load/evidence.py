"""Evidence the load rules read, built from ``metrics`` (so the same rules run on live and on recorded results)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infradoctor.load.taxonomy import REJECTION_CLASSES


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
    """Finished requests."""
    throughput_rps: float
    """Completions per second."""
    goodput_rps: float
    """Successful completions per second."""
    p50_ms: float
    """Median latency."""
    p99_ms: float
    """p99 latency."""
    p90_ms: float
    """p90 latency."""
    error_rate: float
    """Failed / finished."""
    errors: Mapping[str, int]
    """Failures by class."""
    saturated: bool
    """The generator was the bottleneck (excluded from verdicts)."""
    saturation_reason: str | None = None
    """Why it was flagged saturated."""
    client_cpu_fraction: float | None = None
    """Event-loop thread CPU / wall."""
    first_latencies_ms: Sequence[float] = ()
    """First requests' latencies in completion order."""
    window_means_ms: Sequence[float] = ()
    """Mean latency per 1 s window."""
    ok_max_ms: float = math.nan
    """Slowest successful response."""
    unsent: int = 0
    """Open loop: requests never sent because the client queue did not drain."""
    interrupted: bool = False
    """Cut short by Ctrl-C."""

    @property
    def rejections(self) -> int:
        """Requests the server shed on purpose (429, 503)."""
        return sum(self.errors.get(name, 0) for name in REJECTION_CLASSES)

    @property
    def read_timeouts(self) -> int:
        """Requests that hit the client timeout."""
        return int(self.errors.get("read_timeout", 0))


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

    @property
    def valid_points(self) -> list[PointEvidence]:
        """Points fit for verdicts: not generator-saturated, not interrupted, with completed requests."""
        return [p for p in self.points if not p.saturated and not p.interrupted and p.completed > 0]

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any]) -> LoadEvidence:
        """Evidence from a ``load`` result's metrics."""
        points = [point_from_dict(p) for p in metrics.get("points") or ()]
        points.sort(key=lambda p: p.level)
        timeout = metrics.get("settings", {}).get("timeout_s") if isinstance(metrics.get("settings"), Mapping) else None
        return cls(
            mode=str(metrics.get("mode", "closed")),
            points=tuple(points),
            knee=metrics.get("knee"),
            timeout_s=float(timeout) if isinstance(timeout, (int, float)) else math.nan,
        )


def _num(value: Any, default: float = math.nan) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def point_from_dict(data: Mapping[str, Any]) -> PointEvidence:
    """A ``metrics.points[]`` entry as evidence."""
    latency = data.get("latency_ms") or {}
    windows = data.get("windows") or ()
    return PointEvidence(
        label=str(data.get("label", "")),
        mode=str(data.get("mode", "closed")),
        level=_num(data.get("offered"), 0.0),
        completed=int(data.get("completed") or 0),
        throughput_rps=_num(data.get("throughput_rps"), 0.0),
        goodput_rps=_num(data.get("goodput_rps"), 0.0),
        p50_ms=_num(latency.get("p50")),
        p99_ms=_num(latency.get("p99")),
        p90_ms=_num(latency.get("p90")),
        error_rate=_num(data.get("error_rate"), 0.0),
        errors={str(k): int(v) for k, v in (data.get("errors") or {}).items()},
        saturated=bool(data.get("saturated")),
        saturation_reason=data.get("saturation_reason"),
        client_cpu_fraction=data.get("client_cpu_fraction"),
        first_latencies_ms=tuple(float(v) for v in data.get("first_latencies_ms") or ()),
        window_means_ms=tuple(float(w["mean_ms"]) for w in windows if w.get("mean_ms") is not None),
        ok_max_ms=_num(data.get("ok_max_ms")),
        unsent=int(data.get("unsent") or 0),
        interrupted=bool(data.get("interrupted")),
    )
