"""Sweeps over load levels: fixed lists, ``auto`` concurrency doubling, and the ``--rate auto`` SLO search.

Per-point hooks: ``on_point`` gets each finished point; *observers* (:class:`PointObserver`) are told when each
point starts and ends and return what they recorded during it (a router's or model server's own metrics, sampled
while the point ran), which lands in ``PointResult.observations`` and ``metrics.points[].observations`` under the
observer's name; :func:`infradoctor.load.run` also asks them for findings over the whole run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from infradoctor.findings import Finding
    from infradoctor.load.metrics import LoadMetrics

from infradoctor.load.engine import PointResult, StopSignal, point_label, run_point_async, run_sync
from infradoctor.load.knee import CurvePoint, Knee, find_knee
from infradoctor.load.spec import RequestSpec

AUTO_START_CONCURRENCY = 1
"""``--concurrency auto`` starts here and doubles."""
AUTO_MAX_CONCURRENCY = 256
"""... up to this many workers."""
AUTO_POINTS_PAST_KNEE = 2
"""``auto`` runs this many levels past the knee (enough to tell serialisation and unbounded queueing apart)."""
AUTO_STOP_ERROR_RATE = 0.05
"""``auto`` stops after a point where more than this share of requests failed."""
SLO_MIN_ACHIEVED = 0.9
"""An open-loop point meets the SLO only if the server completed at least this share of the offered rate."""
SLO_DEFAULT = "p99<1s"
"""SLO used by ``--rate auto`` when none is given."""
SLO_SEARCH_STEPS = 4
"""Bisection steps between the last rate that met the SLO and the first that did not."""
SLO_MAX_POINTS = 16
"""Upper bound on points in an SLO search."""

_SLO_PART = re.compile(r"^\s*(p\d+(?:\.\d+)?|errors?)\s*(<=|<)\s*([\d.]+)\s*(ms|s|%)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Slo:
    """A latency objective (``p99 < 500 ms``) and an error-rate ceiling."""

    percentile: float = 99.0
    """Percentile the latency bound applies to."""
    max_ms: float = 1000.0
    """Latency bound in ms."""
    max_error_rate: float = 0.01
    """Largest acceptable failed share."""
    text: str = SLO_DEFAULT
    """As the user wrote it."""

    @classmethod
    def parse(cls, text: str) -> Slo:
        """``p99<500ms``, ``p95<=0.2s``, optionally ``,errors<1%``; raises ValueError."""
        percentile, max_ms, max_error = 99.0, math.nan, 0.01
        for part in text.split(","):
            match = _SLO_PART.match(part)
            if not match:
                raise ValueError(f"cannot read SLO part {part!r}; expected e.g. 'p99<500ms' or 'errors<1%'")
            name, _, number, unit = match.groups()
            value = float(number)
            if name.lower().startswith("error"):
                max_error = value / 100.0 if unit == "%" else value
                continue
            percentile = float(name[1:])
            if not 0 < percentile < 100:
                raise ValueError(f"percentile out of range in {part!r}")
            if unit == "%":
                raise ValueError(f"a latency bound needs ms or s, not % ({part!r})")
            max_ms = value * 1000.0 if unit == "s" else value
        if not math.isfinite(max_ms):
            raise ValueError(f"SLO {text!r} has no latency bound such as p99<500ms")
        return cls(percentile, max_ms, max_error, text.strip())

    def check(self, point: PointResult) -> tuple[bool, float]:
        """(met, latency at the SLO percentile in ms) for one open-loop point."""
        value = point.latency.percentiles_us([self.percentile])[0] / 1000.0 if point.latency.count else math.inf
        offered = point.rate or 0.0
        achieved_ok = offered <= 0 or point.completed_rps >= SLO_MIN_ACHIEVED * offered
        met = value <= self.max_ms and point.error_rate <= self.max_error_rate and achieved_ok and point.unsent == 0
        return met, value

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "text": self.text,
            "percentile": self.percentile,
            "max_ms": self.max_ms,
            "max_error_rate": self.max_error_rate,
        }


@dataclass
class SweepResult:
    """The points of a sweep, the knee among them, and why it stopped."""

    mode: str
    """``closed`` or ``open``."""
    points: list[PointResult] = field(default_factory=list)
    """Points in the order they ran."""
    stop_reason: str = "done"
    """``done``, ``knee``, ``errors``, ``generator-saturated``, ``max-concurrency``, ``slo-search``, ``unreachable``
    (nothing connected), ``interrupted``."""
    slo: Slo | None = None
    """The objective: a rate search's target, or judged at each point of any other sweep."""
    slo_max_rate: float | None = None
    """Highest rate that met the SLO (closed loop: the throughput of the highest concurrency that met it; None when
    no point did)."""
    slo_max_concurrency: int | None = None
    """Closed loop: highest concurrency whose point met the SLO."""

    @property
    def interrupted(self) -> bool:
        """The sweep was cut short by a stop signal."""
        return self.stop_reason == "interrupted"

    @property
    def unreachable(self) -> bool:
        """The sweep was given up because nothing connected."""
        return self.stop_reason == "unreachable"

    @property
    def knee(self) -> Knee | None:
        """The knee among the points where the generator was not saturated."""
        valid = [p for p in self.points if not p.saturated and not p.interrupted and not p.unreachable]
        knee = find_knee([curve_point(p) for p in valid])
        if knee is None:
            return None
        # map back to the index in self.points
        return replace(knee, index=self.points.index(valid[knee.index]))


def curve_point(point: PointResult) -> CurvePoint:
    """A point's position on the throughput-latency curve."""
    n = point.latency.count
    if not n:
        return CurvePoint(point.level, point.throughput_rps, math.nan, point.error_rate)
    p99 = point.latency.percentiles_us([99.0])[0] / 1000.0
    ci: tuple[float, float] | None = None
    if point.latency.quantile_ci_ranks(0.99)[1] < point.latency.count:
        # enough requests (about 800 and more) for the interval to be more than "up to the slowest one", which one
        # cold or timed-out request would set; fewer, and the knee rule does without intervals
        low, high = point.latency.quantile_ci_us(0.99)
        ci = (low / 1000.0, high / 1000.0)
    return CurvePoint(point.level, point.throughput_rps, p99, point.error_rate, ci, n)


PointCallback = Callable[[PointResult], None]


class PointObserver(Protocol):
    """Something that watches each point from the side (e.g. a sampler of the router's or server's metrics).

    ``point_started`` runs just before a point (in the event loop: keep it short; sample on a thread of its own),
    ``point_finished`` just after it and returns what it recorded, stored as ``point.observations[name]`` (plain
    JSON data), or None to store nothing; ``findings`` runs once after the sweep, over the whole result's metrics
    (also after Ctrl-C, and over what was measured when the sweep failed: the place to stop sampling).
    """

    name: str
    """Key of its observations."""

    def point_started(self, label: str, level: float, mode: str) -> None:
        """A point is about to run."""

    def point_finished(self, point: PointResult) -> Mapping[str, Any] | None:
        """The point ended: what was observed during it."""

    def findings(self, metrics: LoadMetrics) -> Sequence[Finding]:
        """Findings from what was observed over the run."""


async def run_sweep_async(
    spec: RequestSpec,
    *,
    concurrency: Sequence[int] | str | None = None,
    rate: Sequence[float] | str | None = None,
    slo: Slo | None = None,
    max_concurrency: int = AUTO_MAX_CONCURRENCY,
    start_rate: float = 10.0,
    on_point: PointCallback | None = None,
    observers: Sequence[PointObserver] = (),
    stop: StopSignal | None = None,
    **point_options: Any,
) -> SweepResult:
    """Run a sweep inside a running event loop; see :func:`run_sweep`."""
    if (concurrency is None) == (rate is None):
        raise ValueError("give concurrency levels (closed loop) or rates (open loop), not both")
    sweep = SweepResult(mode="closed" if concurrency is not None else "open", slo=slo)

    async def point(**level: Any) -> PointResult | None:
        if stop is not None and stop.is_set():
            sweep.stop_reason = "interrupted"
            return None
        offered = float(level.get("concurrency") or level.get("rate") or 0.0)
        label = point_label(level.get("concurrency"), level.get("rate"))
        for observer in observers:
            observer.point_started(label, offered, sweep.mode)
        result = await run_point_async(spec, stop=stop, **level, **point_options)
        for observer in observers:
            observed = observer.point_finished(result)
            if observed is not None:
                result.observations[observer.name] = dict(observed)
        sweep.points.append(result)
        if on_point is not None:
            on_point(result)
        if result.interrupted:
            sweep.stop_reason = "interrupted"
            return None
        if result.unreachable:
            sweep.stop_reason = "unreachable"
            return None
        return result

    if isinstance(rate, str):
        await _slo_search(sweep, point, slo or Slo.parse(SLO_DEFAULT), start_rate)
        return sweep
    if isinstance(concurrency, str):
        await _auto_concurrency(sweep, point, max_concurrency)
    for workers in () if isinstance(concurrency, str) else concurrency or ():
        if await point(concurrency=int(workers)) is None:
            break
    for offered in rate or ():
        if await point(rate=float(offered)) is None:
            break
    if slo is not None:
        _judge_slo(sweep, slo)
    return sweep


def _judge_slo(sweep: SweepResult, slo: Slo) -> None:
    """The highest level whose point met ``slo`` (a sweep of given levels, open or closed loop)."""
    for p in sweep.points:
        if p.saturated or p.interrupted or not slo.check(p)[0]:
            continue
        if sweep.mode == "closed" and p.concurrency is not None:
            if sweep.slo_max_concurrency is None or p.concurrency > sweep.slo_max_concurrency:
                sweep.slo_max_concurrency, sweep.slo_max_rate = p.concurrency, p.throughput_rps
        elif p.rate is not None and (sweep.slo_max_rate is None or p.rate > sweep.slo_max_rate):
            sweep.slo_max_rate = p.rate


async def _auto_concurrency(sweep: SweepResult, point: Any, max_concurrency: int) -> None:
    level: int = AUTO_START_CONCURRENCY
    while level <= max_concurrency:
        result = await point(concurrency=level)
        if result is None:
            return
        if result.saturated:
            sweep.stop_reason = "generator-saturated"
            return
        if result.error_rate > AUTO_STOP_ERROR_RATE:
            sweep.stop_reason = "errors"
            return
        knee = sweep.knee
        if knee is not None and len(sweep.points) - 1 - knee.index >= AUTO_POINTS_PAST_KNEE:
            sweep.stop_reason = "knee"
            return
        level *= 2
    sweep.stop_reason = "max-concurrency"


async def _slo_search(sweep: SweepResult, point: Any, slo: Slo, start_rate: float) -> None:
    sweep.slo = slo
    good: float | None = None
    bad: float | None = None
    rate = start_rate
    bisections = 0
    for _ in range(SLO_MAX_POINTS):
        result = await point(rate=rate)
        if result is None:
            return
        met, _ = slo.check(result)
        if result.saturated and met:
            sweep.slo_max_rate = rate
            sweep.stop_reason = "generator-saturated"
            return
        if met:
            good = rate
            sweep.slo_max_rate = rate
        else:
            bad = rate
        if bad is None:
            rate = rate * 2.0
            continue
        if good is None:
            rate = rate / 2.0
            if rate < 0.1:
                break
            continue
        bisections += 1
        if bisections > SLO_SEARCH_STEPS or bad / good < 1.05:
            break
        rate = round((good + bad) / 2.0, 3)
    sweep.stop_reason = "slo-search"


def run_sweep(spec: RequestSpec, **options: Any) -> SweepResult:
    """Run a sweep on its own event loop.

    ``concurrency`` is a list of worker counts or ``"auto"`` (1, 2, 4, ... until two levels past the knee,
    errors above 5%, a saturated generator, or ``max_concurrency``); ``rate`` is a list of rates or ``"auto"``
    (double from ``start_rate`` until ``slo`` fails, then bisect). ``on_point`` gets each finished point,
    ``observers`` (:class:`PointObserver`) watch each point from the side; a target where nothing connects ends the
    sweep after its first point (``stop_reason`` ``unreachable``); other
    options go to :func:`~infradoctor.load.engine.run_point_async` (``duration_s``, ``requests``, ``timeout_s``,
    ``arrivals``, ``on_request``, ``on_progress``, ``processes``, ...).
    """
    result: SweepResult = run_sync(run_sweep_async(spec, **options))
    return result
