"""The ``load`` command's typed metrics, and how a point's measurements become them.

``Result.metrics`` of ``infradoctor load``; ``metrics.load`` of ``profile --load-url``.

Every latency here is of successful responses (see :mod:`infradoctor.load.point`); failures are counted by class
and timed apart (``error_latency_ms``). One p99 everywhere: the per-point summary, the headline, the knee and the
stored distribution (its nearest-rank percentiles are the histogram's, :meth:`Histogram.sample_ms`) all read the
same histogram the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from infradoctor.load.histogram import Histogram
from infradoctor.load.point import WINDOW_S, PointResult
from infradoctor.metrics import Metrics

DISTRIBUTION_LIMIT = 5000
"""Values kept in ``metrics.distributions.latency_ms`` (the reference point's successful responses)."""


@dataclass(frozen=True)
class LatencySummary(Metrics):
    """Percentiles of a latency histogram in milliseconds (nearest rank; nulls when it is empty)."""

    count: int = 0
    """Values in the histogram (the n behind every percentile)."""
    min: float | None = None
    """Fastest."""
    mean: float | None = None
    """Exact mean."""
    p50: float | None = None
    """Median."""
    p90: float | None = None
    """90th percentile."""
    p95: float | None = None
    """95th percentile."""
    p99: float | None = None
    """99th percentile."""
    p99_9: float | None = None
    """99.9th percentile."""
    max: float | None = None
    """Slowest."""
    p99_ci: tuple[float, float] | None = None
    """95% interval of the p99 (order statistics; its top is the slowest value while n is small)."""

    @classmethod
    def of(cls, hist: Histogram) -> LatencySummary:
        """The summary of ``hist``."""
        if not hist.count:
            return cls()
        raw = hist.summary_ms()
        values = {k: v for k, v in raw.items() if k != "p99_ci"}
        ci = raw.get("p99_ci")
        assert isinstance(ci, list)
        return cls(p99_ci=(float(ci[0]), float(ci[1])), **values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Window(Metrics):
    """One second of a point."""

    t_s: float
    """Start of the window, seconds after the point started."""
    completed: int
    """Requests completed in it."""
    errors: int
    """Of which failed."""
    mean_ms: float | None
    """Mean latency of its successful responses."""
    max_ms: float | None
    """Slowest successful response in it."""


@dataclass(frozen=True)
class StreamMetrics(Metrics):
    """Streaming (SSE / OpenAI-compatible) timing of a point."""

    ttft_ms: LatencySummary
    """Time to the first token, from the intended (open loop) or issue (closed loop) time."""
    itl_ms: LatencySummary
    """Gaps between tokens."""
    output_tokens: int
    """Tokens received (the server's usage counts where sent)."""
    streams: int
    """Successful streams with at least one token."""
    output_tokens_per_s: float | None
    """Tokens per second of the measurement window."""
    ttft_from_send_ms: LatencySummary | None = None
    """Open loop: time to the first token from the actual write (uncorrected)."""


@dataclass(frozen=True)
class PointMetrics(Metrics):
    """One offered load: what was sent, what came back, how fast."""

    label: str
    """``c=8`` (closed loop) or ``r=100`` (open loop)."""
    mode: Literal["closed", "open"]
    """The loop."""
    offered: float
    """Offered load: concurrency or requests per second."""
    completed: int
    """Requests completed: successes and failures."""
    ok: int
    """Successful (200-399) responses."""
    throughput_rps: float
    """Successful responses per second of the measurement window."""
    error_rate: float
    """Failed / completed."""
    latency_ms: LatencySummary
    """Successful responses' latency from the intended (open loop) or issue (closed loop) time."""
    concurrency: int | None = None
    """Closed loop: workers."""
    rate: float | None = None
    """Open loop: offered requests per second."""
    arrivals: str | None = None
    """Open loop: ``constant`` or ``poisson``."""
    duration_s: float = 0.0
    """Length of the measurement window."""
    elapsed_s: float = 0.0
    """Wall time including the drain of in-flight requests."""
    sent: int = 0
    """Requests written."""
    unsent: int = 0
    """Open loop: requests the client never sent because no connection came free (no latency; fails an SLO)."""
    cancelled: int = 0
    """Requests in flight when Ctrl-C ended the point."""
    completed_rps: float | None = None
    """Completed requests (successes and failures) per second: whether the server kept up with the offer."""
    errors: dict[str, int] = field(default_factory=dict)
    """Failures by class (``infradoctor.load.taxonomy``)."""
    status_counts: dict[str, int] = field(default_factory=dict)
    """Responses by HTTP status."""
    error_latency_ms: LatencySummary | None = None
    """Failed requests: how long each took to fail (read timeouts at the timeout); null without failures."""
    latency_from_send_ms: LatencySummary | None = None
    """Open loop: successful responses' latency from the write (uncorrected for coordinated omission)."""
    pacer_lag_ms: LatencySummary | None = None
    """Open loop: how late the pacer dispatched requests behind their schedule (generator health)."""
    server_timing_ms: dict[str, LatencySummary] = field(default_factory=dict)
    """Server-side stages from ``Server-Timing`` / ``x-envoy-upstream-service-time``."""
    network_queue_ms: LatencySummary | None = None
    """Successful responses' latency from send minus the server's own total: network and queueing outside it."""
    stream: StreamMetrics | None = None
    """Streaming timing (``--sse`` / ``--openai``)."""
    first_latencies_ms: tuple[float, ...] = ()
    """The first successful responses' latencies, in completion order (cold-start evidence)."""
    windows: tuple[Window, ...] = ()
    """The point second by second."""
    client_cpu_fraction: float | None = None
    """The generator's event-loop thread busy share of one core (CPU + run-queue wait)."""
    loop_lag_max_ms: float = 0.0
    """Largest lateness of the engine's housekeeping timer."""
    saturated: bool = False
    """The generator, not the server, limited this point (excluded from verdicts)."""
    saturation_reason: str | None = None
    """Why it was flagged saturated."""
    timeout_s: float | None = None
    """Client timeout."""
    interrupted: bool = False
    """Cut short by Ctrl-C."""
    unreachable: bool = False
    """Given up: nothing connected within the grace period."""
    observations: dict[str, Any] = field(default_factory=dict)
    """What per-point observers recorded (router and server metrics ...), by observer name."""


@dataclass(frozen=True)
class KneeSide(Metrics):
    """The level after the knee."""

    level: float
    """Offered load."""
    throughput_rps: float
    """Successful responses per second."""
    p99_ms: float
    """p99 latency."""
    p99_n: int = 0
    """Successful responses behind that p99."""
    p99_ci_ms: tuple[float, float] | None = None
    """95% interval of the p99, when the point had enough responses for one (see ``infradoctor.load.knee``)."""


@dataclass(frozen=True)
class KneeMetrics(Metrics):
    """The knee of the sweep (definition in ``infradoctor.load.knee``)."""

    kind: Literal["concurrency", "rate"]
    """What the levels are."""
    level: float
    """Offered load at the knee."""
    throughput_rps: float
    """Successful responses per second at the knee."""
    p99_ms: float
    """p99 at the knee."""
    level_range: tuple[float, float]
    """The knee lies between these levels."""
    next: KneeSide
    """The next level, where the gain stopped."""
    throughput_gain: float
    """Relative throughput gain from the knee to the next level."""
    latency_growth: float
    """Relative p99 growth from the knee to the next level."""
    rule: str
    """The definition applied, in words."""
    concurrency: float | None = None
    """Closed loop: the knee's concurrency."""
    rate: float | None = None
    """Open loop: the knee's rate."""
    p99_n: int = 0
    """Successful responses behind the knee's p99."""
    p99_ci_ms: tuple[float, float] | None = None
    """95% interval of the knee's p99."""


@dataclass(frozen=True)
class ErrorOnset(Metrics):
    """The lowest load where failures reach ``infradoctor.load.analysis.ERROR_ONSET_RATE``."""

    label: str
    """Its point."""
    level: float
    """Its offered load."""
    error_rate: float
    """Failed share there."""
    errors: dict[str, int] = field(default_factory=dict)
    """Failures by class there, most first."""


@dataclass(frozen=True)
class LoadCurve(Metrics):
    """Latency against load, one entry per point in run order (plot data)."""

    level: tuple[float, ...] = ()
    """Offered loads."""
    throughput_rps: tuple[float, ...] = ()
    """Successful responses per second."""
    p50_ms: tuple[float | None, ...] = ()
    """Median latency."""
    p99_ms: tuple[float | None, ...] = ()
    """p99 latency."""
    error_rate: tuple[float, ...] = ()
    """Failed shares."""


@dataclass(frozen=True)
class LoadHeadline(Metrics):
    """Flat key numbers (units in the names) of the reference point; what is not available is left out."""

    throughput_rps: float | None = None
    """Successful responses per second at the reference point."""
    max_throughput_rps: float | None = None
    """Highest throughput of any non-saturated point."""
    p50_ms: float | None = None
    """Median latency at the reference point."""
    p99_ms: float | None = None
    """p99 at the reference point."""
    p99_9_ms: float | None = None
    """p99.9 at the reference point."""
    error_rate: float | None = None
    """Failed share at the reference point."""
    requests: int | None = None
    """Requests completed over the whole run."""
    knee_concurrency: float | None = None
    """Closed loop: concurrency at the knee."""
    knee_rate_rps: float | None = None
    """Open loop: rate at the knee."""
    knee_throughput_rps: float | None = None
    """Throughput at the knee."""
    knee_p99_ms: float | None = None
    """p99 at the knee."""
    ttft_p50_ms: float | None = None
    """Streaming: median time to first token."""
    ttft_p99_ms: float | None = None
    """Streaming: p99 time to first token."""
    itl_p50_ms: float | None = None
    """Streaming: median inter-token latency."""
    output_tokens_per_s: float | None = None
    """Streaming: tokens per second."""
    slo_max_rate_rps: float | None = None
    """``--rate auto``: the highest rate that met the SLO."""
    calibration_rps: float | None = None
    """``--calibrate``: the generator's throughput against the null server."""
    client_cpu_fraction: float | None = None
    """``--calibrate``: the generator's event-loop busy share meanwhile."""


@dataclass(frozen=True)
class LoadSettings(Metrics):
    """How the run was made."""

    url: str | None = None
    """Target URL (credentials redacted when stored)."""
    method: str = "GET"
    """HTTP method."""
    timeout_s: float | None = None
    """Per-request timeout."""
    duration_s: float | None = None
    """Seconds per point (null when bounded by a request count)."""
    requests: int | None = None
    """Requests per point (null when bounded by a duration)."""
    arrivals: str | None = None
    """Open loop: arrival process."""
    levels: tuple[float, ...] | str | None = None
    """The levels asked for, or ``auto``."""
    stream: bool = False
    """Responses timed as server-sent events."""
    openai: bool = False
    """OpenAI-compatible streaming."""
    bodies: int = 0
    """Request bodies sent in rotation."""
    parser: str | None = None
    """HTTP parser: ``httptools`` or ``python``."""
    event_loop: str | None = None
    """``uvloop`` or ``asyncio``."""
    processes: int = 1
    """Generator processes per point."""
    calibrate: bool = False
    """A ``--calibrate`` run against the built-in null server."""


@dataclass(frozen=True)
class SloResult(Metrics):
    """The user's objective (``--slo``): the ``--rate auto`` search's target, or judged at each point of a sweep."""

    text: str
    """The objective as written."""
    percentile: float
    """Percentile the latency bound applies to."""
    max_ms: float
    """Latency bound."""
    max_error_rate: float
    """Error-rate ceiling."""
    max_rate_rps: float | None
    """Highest rate that met it (closed loop: the throughput at ``max_concurrency``; null when no point did)."""
    met: bool
    """Some point met it."""
    max_concurrency: int | None = None
    """Closed loop: the highest concurrency whose point met it."""


@dataclass(frozen=True)
class Calibration(Metrics):
    """The generator's own ceiling against the built-in null server."""

    concurrency: int
    """Connections used."""
    throughput_rps: float
    """Responses per second."""
    client_cpu_fraction: float | None
    """Event-loop busy share of one core."""
    p99_ms: float | None
    """p99 latency."""
    parser: str
    """HTTP parser."""
    event_loop: str
    """Event loop."""
    processes: int = 1
    """Generator processes."""


@dataclass(frozen=True)
class LoadMetrics(Metrics):
    """Metrics of ``infradoctor load``."""

    command: ClassVar[str] = "load"

    mode: Literal["closed", "open"]
    """The loop: closed (concurrency) or open (rate)."""
    settings: LoadSettings
    """How the run was made."""
    points: tuple[PointMetrics, ...]
    """One per offered load, in run order."""
    headline: LoadHeadline
    """Key numbers of the reference point."""
    knee: KneeMetrics | None = None
    """The knee; null when none was found."""
    error_onset: ErrorOnset | None = None
    """The lowest load where >= 1% of requests failed; null when none."""
    reference_point: str | None = None
    """Label of the point the headline and the distribution describe (the knee, else the highest non-saturated
    point)."""
    curve: LoadCurve = field(default_factory=LoadCurve)
    """Latency against load."""
    distributions: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """``latency_ms``: at most 5000 successful-response latencies of the reference point, ascending, with the
    histogram's own percentiles (for comparisons between runs)."""
    stop_reason: str = "done"
    """Why the sweep ended: ``done``, ``knee``, ``errors``, ``generator-saturated``, ``max-concurrency``,
    ``slo-search``, ``unreachable``, ``interrupted``, ``calibration``."""
    slo: SloResult | None = None
    """The ``--rate auto`` search."""
    calibration: Calibration | None = None
    """``--calibrate``: the generator's ceiling."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; the headline lists only the numbers that are available."""
        out = super().to_dict()
        out["headline"] = {k: v for k, v in out["headline"].items() if v is not None}
        return out


def _summary_or_none(hist: Histogram | None) -> LatencySummary | None:
    return LatencySummary.of(hist) if hist is not None and hist.count else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def point_metrics(point: PointResult) -> PointMetrics:
    """A point's measurements as ``metrics.points[]``."""
    stream: StreamMetrics | None = None
    if point.ttft is not None:
        decode_s = point.duration_s if point.duration_s > 0 else math.nan
        stream = StreamMetrics(
            ttft_ms=LatencySummary.of(point.ttft),
            ttft_from_send_ms=LatencySummary.of(point.ttft_from_send) if point.ttft_from_send is not None else None,
            itl_ms=LatencySummary.of(point.itl) if point.itl is not None else LatencySummary(),
            output_tokens=point.output_tokens,
            streams=point.stream_ok,
            output_tokens_per_s=round(point.output_tokens / decode_s, 3) if math.isfinite(decode_s) else None,
        )
    windows = tuple(
        Window(
            t_s=i * WINDOW_S,
            completed=int(w[0]),
            errors=int(w[1]),
            mean_ms=round(w[2] / (w[0] - w[1]) / 1000.0, 4) if w[0] > w[1] else None,
            max_ms=round(w[3] / 1000.0, 4) if w[0] > w[1] else None,
        )
        for i, w in enumerate(point.windows)
    )
    return PointMetrics(
        label=point.label,
        mode="open" if point.mode == "open" else "closed",
        offered=point.level,
        completed=point.completed,
        ok=point.ok,
        throughput_rps=round(point.throughput_rps, 3),
        error_rate=round(point.error_rate, 6),
        latency_ms=LatencySummary.of(point.latency),
        concurrency=point.concurrency,
        rate=point.rate,
        arrivals=point.arrivals,
        duration_s=round(point.duration_s, 4),
        elapsed_s=round(point.elapsed_s, 4),
        sent=point.sent,
        unsent=point.unsent,
        cancelled=point.cancelled,
        completed_rps=round(point.completed_rps, 3),
        errors=dict(sorted(point.errors.items())),
        status_counts={str(k): v for k, v in sorted(point.status_counts.items())},
        error_latency_ms=_summary_or_none(point.error_latency),
        latency_from_send_ms=LatencySummary.of(point.latency_from_send) if point.latency_from_send is not None
        else None,
        pacer_lag_ms=LatencySummary.of(point.pacer_lag) if point.pacer_lag is not None else None,
        server_timing_ms={name: LatencySummary.of(hist) for name, hist in sorted(point.stages.items())},
        network_queue_ms=_summary_or_none(point.network),
        stream=stream,
        first_latencies_ms=tuple(round(v, 4) for v in point.first_latencies_ms),
        windows=windows,
        client_cpu_fraction=round(point.client_cpu_fraction, 4) if math.isfinite(point.client_cpu_fraction)
        else None,
        loop_lag_max_ms=round(point.loop_lag_max_ms, 3),
        saturated=point.saturated,
        saturation_reason=point.saturation_reason,
        timeout_s=point.timeout_s,
        interrupted=point.interrupted,
        unreachable=point.unreachable,
        observations=dict(point.observations),
    )
