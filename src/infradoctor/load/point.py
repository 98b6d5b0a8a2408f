"""What one load level (a *point*) measured, and the small types the engine hands its callers.

Definitions, the same in every output (per-point line, table, headline, stored distribution):

- a request is *completed* when it ended, one way or another: a successful response (status 200-399), an HTTP
  error status (400-599) or a transport failure (:mod:`.taxonomy`); ``completed = ok + failed``;
- ``latency`` holds the successful responses only, from the intended (open loop) or issue (closed loop) time:
  every latency percentile is a percentile of successful responses; failed requests are counted by class in
  ``errors`` and timed apart in ``error_latency`` (read timeouts at exactly the timeout);
- ``throughput_rps`` counts successful responses per second of the measurement window; ``completed_rps`` counts
  every completed request (whether the server kept up with the offered load, successes or not).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infradoctor.load.histogram import Histogram

WINDOW_S = 1.0
"""Width of the per-point time windows (throughput and latency over time)."""
MAX_WINDOWS = 3600
"""Windows kept per point; later requests fall into the last window (bounded memory for long runs)."""
FIRST_REQUESTS = 10
"""Latencies of the first successful responses of a point kept verbatim (cold-start evidence)."""
SATURATED_CPU_FRACTION = 0.85
"""A point whose event-loop thread used at least this share of one core is flagged as generator-saturated."""
SATURATED_PACER_LAG_MS = 10.0
"""Open loop: a p90 lag of the pacer behind its schedule above this flags the generator as saturated (p90, not
p99: a busy machine delays a few timer wake-ups by 10 ms and more; a generator that cannot keep up lags on most)."""
SATURATED_PACER_LAG_SHARE = 0.1
"""... and above this share of the point's median latency: a lag small against what is measured does not matter."""
OPEN_WINDOW_MAX_SHIFT = 0.5
"""Open-loop throughput is measured between first and last completion when they span at least half the window."""


class StopSignal:
    """Set it (e.g. from a SIGINT handler) to end the current point early and the sweep after it."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        """Ask the engine to stop."""
        self._set = True

    def is_set(self) -> bool:
        """True once set."""
        return self._set


@dataclass(frozen=True)
class RequestOutcome:
    """One request as seen by the client, passed to ``on_request`` when given."""

    index: int
    """Request number within the point."""
    worker: int
    """Closed-loop worker (-1 in the open loop)."""
    intended_s: float
    """Intended (open loop) or issue (closed loop) time, seconds after the point started."""
    sent_s: float
    """When the bytes were written, seconds after the point started."""
    latency_s: float
    """From the intended/issue time to completion (at the timeout for read timeouts)."""
    latency_from_send_s: float
    """From the write to completion."""
    status: int
    """HTTP status (0 when no response)."""
    error: str | None
    """Error class from :mod:`.taxonomy`, or None for a success."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Captured response headers (lower-case names)."""
    stages_ms: Mapping[str, float] = field(default_factory=dict)
    """Server-side stage times from Server-Timing / x-envoy-upstream-service-time."""
    ttft_s: float | None = None
    """Streaming: time to the first token-bearing event, from the intended/issue time."""
    output_tokens: int = 0
    """Streaming: tokens in the response."""


@dataclass(frozen=True)
class Progress:
    """A snapshot of the running point, passed to ``on_progress`` a few times a second."""

    label: str
    """The point's label, e.g. ``c=8`` or ``r=100``."""
    elapsed_s: float
    """Seconds since the point started."""
    duration_s: float | None
    """Planned duration (None when bounded by request count)."""
    requests: int | None
    """Planned request count (None when bounded by duration)."""
    completed: int
    """Requests finished so far (successes and failures)."""
    errors: int
    """Failures so far."""
    throughput_rps: float
    """Successful responses per second so far."""
    p50_ms: float
    """Median latency of the successful responses so far (NaN before the first)."""
    p99_ms: float
    """p99 latency of the successful responses so far (NaN before the first)."""


@dataclass
class PointResult:
    """Everything measured at one load level. Histograms are kept whole (mergeable); :mod:`.metrics` summarises."""

    label: str
    """``c=8`` (closed loop) or ``r=100`` (open loop)."""
    mode: str
    """``closed`` or ``open``."""
    concurrency: int | None
    """Closed loop: workers."""
    rate: float | None
    """Open loop: offered requests per second."""
    arrivals: str | None
    """Open loop: ``constant`` or ``poisson``."""
    timeout_s: float
    """Client timeout used."""
    duration_s: float = 0.0
    """Length of the measurement window (issue phase), seconds."""
    elapsed_s: float = 0.0
    """Wall time including the drain of in-flight requests."""
    sent: int = 0
    """Requests written."""
    completed: int = 0
    """Requests finished: successes and failures."""
    ok: int = 0
    """Requests with a successful (200-399) response."""
    completed_in_window: int = 0
    """Requests finished inside the measurement window."""
    ok_in_window: int = 0
    """Successes finished inside the measurement window (throughput numerator)."""
    unsent: int = 0
    """Open loop: requests never sent because the server could not keep up: still queued in the client when the
    point ended, or dropped at a full client queue. They have no latency (no response) and are not in
    ``completed``; an SLO is not met by a point that left any."""
    cancelled: int = 0
    """Requests in flight when Ctrl-C ended the point: neither successes nor failures."""
    errors: dict[str, int] = field(default_factory=dict)
    """Failures by class (:mod:`.taxonomy`)."""
    status_counts: dict[int, int] = field(default_factory=dict)
    """Responses by HTTP status."""
    latency: Histogram = field(default_factory=Histogram)
    """Successful responses: latency from the intended (open) / issue (closed) time, microseconds."""
    error_latency: Histogram = field(default_factory=Histogram)
    """Failed requests: the time each took until it failed (read timeouts at the timeout), microseconds."""
    latency_from_send: Histogram | None = None
    """Open loop: successful responses' latency from the actual write."""
    pacer_lag: Histogram | None = None
    """Open loop: how late the pacer dispatched each request relative to its schedule (generator health)."""
    first_completion_s: float | None = None
    """When the first request finished, seconds after the point started."""
    last_window_completion_s: float | None = None
    """When the last request that finished inside the measurement window did, seconds after the start."""
    first_latencies_ms: list[float] = field(default_factory=list)
    """The first successful responses' latencies, in completion order."""
    windows: list[list[float]] = field(default_factory=list)
    """Per-second ``[completed, errors, success latency sum (us), success latency max (us)]``."""
    stages: dict[str, Histogram] = field(default_factory=dict)
    """Server-side stage times (us) from response headers."""
    network: Histogram | None = None
    """Client latency from send minus the server's total (us): network plus queueing outside the server."""
    ttft: Histogram | None = None
    """Streaming: time to first token (us), from intended/issue time."""
    ttft_from_send: Histogram | None = None
    """Streaming, open loop: time to first token from the actual write (uncorrected)."""
    itl: Histogram | None = None
    """Streaming: gaps between tokens (us)."""
    output_tokens: int = 0
    """Streaming: tokens received."""
    stream_ok: int = 0
    """Streaming: completed streams with at least one token."""
    client_cpu_fraction: float = math.nan
    """(CPU time + run-queue wait where the kernel reports it) of the generator's event-loop thread / wall time:
    1.0 means the loop wanted a whole core for the whole point."""
    loop_lag_max_ms: float = 0.0
    """Largest lateness of the engine's housekeeping timer: how long the event loop was blocked."""
    interrupted: bool = False
    """The point was cut short (Ctrl-C)."""
    unreachable: bool = False
    """Nothing connected within the grace period (:data:`~infradoctor.load.driver.UNREACHABLE_GRACE_S`): the
    point was given up."""
    observations: dict[str, Any] = field(default_factory=dict)
    """What per-point observers (:class:`~infradoctor.load.sweep.PointObserver`) recorded, by observer name."""

    @property
    def level(self) -> float:
        """The offered load: concurrency or rate."""
        return float(self.concurrency if self.concurrency is not None else self.rate or 0.0)

    @property
    def error_count(self) -> int:
        """Failures of any class."""
        return sum(self.errors.values())

    @property
    def error_rate(self) -> float:
        """Failures / completed requests (0 when nothing completed)."""
        return self.error_count / self.completed if self.completed else 0.0

    @property
    def completed_rps(self) -> float:
        """Completed requests (successes and failures) per second within the measurement window.

        Open loop: completions between the first completion and the last one inside the window, over that span,
        so the latency of the first responses does not read as missing throughput (a point of D seconds at rate R
        with latency L completes only about R*(D-L) requests inside the window); closed loop: completions /
        window.
        """
        if self.duration_s <= 0:
            return 0.0
        start, end = self.first_completion_s, self.last_window_completion_s
        if (
            self.mode == "open"
            and start is not None
            and end is not None
            and self.completed_in_window > 2
            and end - start >= (1.0 - OPEN_WINDOW_MAX_SHIFT) * self.duration_s
        ):
            return (self.completed_in_window - 1) / (end - start)
        return self.completed_in_window / self.duration_s

    @property
    def throughput_rps(self) -> float:
        """Successful responses per second within the measurement window (the span of :attr:`completed_rps`)."""
        if not self.completed_in_window:
            return 0.0
        return self.completed_rps * self.ok_in_window / self.completed_in_window

    @property
    def saturation_reason(self) -> str | None:
        """Why the generator itself is the bottleneck at this point, or None."""
        if math.isfinite(self.client_cpu_fraction) and self.client_cpu_fraction >= SATURATED_CPU_FRACTION:
            return f"event-loop thread used {self.client_cpu_fraction:.0%} of a core"
        if self.pacer_lag is not None and self.pacer_lag.count:
            lag_p90 = self.pacer_lag.percentiles_us([90.0])[0] / 1000.0
            p50_ms = self.latency.percentiles_us([50.0])[0] / 1000.0 if self.latency.count else 0.0
            limit = max(SATURATED_PACER_LAG_MS, SATURATED_PACER_LAG_SHARE * p50_ms)
            if lag_p90 > limit:
                return f"pacer ran {lag_p90:.1f} ms behind schedule at p90 (limit {limit:.1f} ms)"
        return None

    @property
    def saturated(self) -> bool:
        """The generator, not the server, limited this point."""
        return self.saturation_reason is not None

    def to_dict(self) -> dict[str, Any]:
        """The ``metrics.points[]`` entry (:class:`~infradoctor.load.metrics.PointMetrics`) as JSON."""
        from infradoctor.load.metrics import point_metrics

        return point_metrics(self).to_dict()


def point_label(concurrency: int | None, rate: float | None) -> str:
    """``c=8`` or ``r=100``."""
    if concurrency is not None:
        return f"c={concurrency}"
    return f"r={rate:g}"
