"""The load engine: one load level (a *point*) in the closed or the open loop, and sweeps over many.

Closed loop (``concurrency=N``): N workers, each owning one keep-alive connection, each sending its next request as
soon as the previous one completes. Latency is measured from when the worker issued the request (connect time
included when the connection had to be opened). A closed loop slows down with the server, so it cannot show
queueing that real independent users would see (coordinated omission): use it to find capacity and the knee.

Open loop (``rate=R``): requests are scheduled by a :class:`~infradoctor.load.pacer.Pacer` regardless of
responses and dispatched to idle connections from a pool (new connections opened on demand up to
``max_connections``; beyond that requests wait in a client queue). ``latency`` is measured from the *intended*
send time (coordinated-omission corrected), ``latency_from_send`` from when the bytes were written; both are kept.

Every request ends in the histogram: successes and HTTP errors at their latency, transport failures at the time
they took, read timeouts at exactly the timeout. Histograms are mergeable and bounded (:mod:`.histogram`), so a
point of any length holds the same memory; a bounded deterministic sample feeds bootstrap comparisons.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import ssl
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infradoctor.load import taxonomy
from infradoctor.load.client import Connection, HeaderConnection, StreamConnection, connection_class, make_sink
from infradoctor.load.histogram import Histogram, ReservoirSample, _numpy
from infradoctor.load.pacer import Pacer
from infradoctor.load.servertiming import server_total_ms, stages_from_headers
from infradoctor.load.spec import RequestSpec

WINDOW_S = 1.0
"""Width of the per-point time windows (throughput and latency over time)."""
MAX_WINDOWS = 3600
"""Windows kept per point; later requests fall into the last window (bounded memory for long runs)."""
FIRST_REQUESTS = 10
"""Latencies of the first requests of a point kept verbatim (cold-start evidence)."""
MAX_STAGES = 32
"""Distinct Server-Timing stage names tracked per point."""
SATURATED_CPU_FRACTION = 0.85
"""A point whose event-loop thread used at least this share of one core is flagged as generator-saturated."""
SATURATED_PACER_LAG_MS = 10.0
"""Open loop: a p90 lag of the pacer behind its schedule above this flags the generator as saturated (p90, not
p99: a busy machine delays a few timer wake-ups by 10 ms and more; a generator that cannot keep up lags on most)."""
SATURATED_PACER_LAG_SHARE = 0.1
"""... and above this share of the point's median latency: a lag small against what is measured does not matter."""
CONNECT_RETRY_DELAY_S = 0.001
"""Pause before a closed-loop worker retries after a failed connect (avoids a busy spin on a dead port)."""
PACER_MIN_SLEEP_S = 0.001
"""Shortest pacer sleep (event-loop timers have millisecond resolution; shorter sleeps busy-spin)."""
OPEN_WINDOW_MAX_SHIFT = 0.5
"""Open-loop throughput is measured between first and last completion when they span at least half the window."""
MAX_PENDING = 100_000
"""Open loop: most requests waiting for a free connection; later arrivals count as unsent (bounded memory)."""
DEFAULT_MAX_CONNECTIONS = 1024
"""Open-loop connection pool limit."""


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
    """Completions per second so far."""
    p50_ms: float
    """Median latency so far."""
    p99_ms: float
    """p99 latency so far."""


@dataclass
class PointResult:
    """Everything measured at one load level. Histograms are kept whole (mergeable); ``to_dict`` summarises."""

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
    """Requests finished (any outcome)."""
    ok: int = 0
    """Requests with a 1xx-3xx response."""
    completed_in_window: int = 0
    """Requests finished inside the measurement window (throughput numerator)."""
    ok_in_window: int = 0
    """Successes finished inside the measurement window (goodput numerator)."""
    unsent: int = 0
    """Open loop: requests never sent because the server could not keep up: still queued in the client when the
    point ended (kept in ``latency`` at the time they had waited), or dropped at a full client queue."""
    errors: dict[str, int] = field(default_factory=dict)
    """Failures by class (:mod:`.taxonomy`)."""
    status_counts: dict[int, int] = field(default_factory=dict)
    """Responses by HTTP status."""
    latency: Histogram = field(default_factory=Histogram)
    """Latency from intended (open) / issue (closed) time, microseconds."""
    latency_from_send: Histogram | None = None
    """Open loop: latency from the actual write."""
    pacer_lag: Histogram | None = None
    """Open loop: how late the pacer dispatched each request relative to its schedule (generator health)."""
    ok_max_us: int = 0
    """Slowest successful response."""
    first_completion_s: float | None = None
    """When the first request finished, seconds after the point started."""
    last_window_completion_s: float | None = None
    """When the last request that finished inside the measurement window did, seconds after the start."""
    sample_ms: list[float] = field(default_factory=list)
    """Bounded deterministic sample of latencies (ms)."""
    first_latencies_ms: list[float] = field(default_factory=list)
    """The first requests' latencies, in completion order."""
    windows: list[list[float]] = field(default_factory=list)
    """Per-second ``[completed, errors, latency_sum_us, latency_max_us]``."""
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
        """Failures / finished requests (0 when nothing finished)."""
        return self.error_count / self.completed if self.completed else 0.0

    @property
    def throughput_rps(self) -> float:
        """Completions per second within the measurement window.

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
    def goodput_rps(self) -> float:
        """Successful completions per second within the measurement window (same window as the throughput)."""
        if not self.completed_in_window:
            return 0.0
        return self.throughput_rps * self.ok_in_window / self.completed_in_window

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
        """The ``metrics.points[]`` entry (milliseconds, rates per second)."""
        out: dict[str, Any] = {
            "label": self.label,
            "mode": self.mode,
            "concurrency": self.concurrency,
            "rate": self.rate,
            "arrivals": self.arrivals,
            "offered": self.level,
            "duration_s": round(self.duration_s, 4),
            "elapsed_s": round(self.elapsed_s, 4),
            "sent": self.sent,
            "completed": self.completed,
            "ok": self.ok,
            "unsent": self.unsent,
            "throughput_rps": round(self.throughput_rps, 3),
            "goodput_rps": round(self.goodput_rps, 3),
            "error_rate": round(self.error_rate, 6),
            "errors": dict(sorted(self.errors.items())),
            "status_counts": {str(k): v for k, v in sorted(self.status_counts.items())},
            "latency_ms": self.latency.summary_ms(),
            "ok_max_ms": round(self.ok_max_us / 1000.0, 4),
            "first_latencies_ms": [round(v, 4) for v in self.first_latencies_ms],
            "windows": [
                {
                    "t_s": i * WINDOW_S,
                    "completed": int(w[0]),
                    "errors": int(w[1]),
                    "mean_ms": round(w[2] / w[0] / 1000.0, 4) if w[0] else None,
                    "max_ms": round(w[3] / 1000.0, 4),
                }
                for i, w in enumerate(self.windows)
            ],
            "client_cpu_fraction": round(self.client_cpu_fraction, 4)
            if math.isfinite(self.client_cpu_fraction)
            else None,
            "loop_lag_max_ms": round(self.loop_lag_max_ms, 3),
            "saturated": self.saturated,
            "saturation_reason": self.saturation_reason,
            "timeout_s": self.timeout_s,
            "interrupted": self.interrupted,
        }
        if self.latency_from_send is not None:
            out["latency_from_send_ms"] = self.latency_from_send.summary_ms()
        if self.pacer_lag is not None:
            out["pacer_lag_ms"] = self.pacer_lag.summary_ms()
        if self.stages:
            out["server_timing_ms"] = {name: hist.summary_ms() for name, hist in sorted(self.stages.items())}
        if self.network is not None and self.network.count:
            out["network_queue_ms"] = self.network.summary_ms()
        if self.ttft is not None:
            decode_s = self.duration_s if self.duration_s > 0 else math.nan
            out["stream"] = {
                "ttft_ms": self.ttft.summary_ms(),
                "ttft_from_send_ms": self.ttft_from_send.summary_ms() if self.ttft_from_send is not None else None,
                "itl_ms": self.itl.summary_ms() if self.itl is not None else {"count": 0},
                "output_tokens": self.output_tokens,
                "streams": self.stream_ok,
                "output_tokens_per_s": round(self.output_tokens / decode_s, 3) if math.isfinite(decode_s) else None,
            }
        return out


ProgressCallback = Callable[[Progress], None]
RequestCallback = Callable[[RequestOutcome], None]


def _ms_of_seconds(value: float) -> float:
    """A latency as the general path records it in the sample: whole microseconds, in milliseconds."""
    return int(value * 1e6 + 0.5) / 1000.0


class _PointRun:
    """Drives one point; implements the connection ``Driver`` protocol."""

    def __init__(
        self,
        spec: RequestSpec,
        result: PointResult,
        *,
        duration_s: float | None,
        max_requests: int | None,
        connect_timeout_s: float,
        max_connections: int,
        seed: int,
        sample_capacity: int,
        on_request: RequestCallback | None,
        on_progress: ProgressCallback | None,
        stop: StopSignal | None,
        pure_python: bool,
        progress_interval_s: float,
        pacer_offset_s: float = 0.0,
        start_at: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.clock = clock
        self.spec = spec
        self.result = result
        self.target = spec.target
        self.requests = spec.wire_requests()
        self.duration_s = duration_s
        self.max_requests = max_requests
        self.timeout_s = result.timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_connections = max_connections
        self.on_request = on_request
        self.on_progress = on_progress
        self.stop = stop
        self.progress_interval_s = progress_interval_s
        capture = frozenset(h.lower().encode("latin-1") for h in spec.capture_headers)
        self.closed_loop = result.mode == "closed"
        # the closed loop's plain case records 200s in batches (FastConnection); anything else goes one by one
        self.fast = (
            self.closed_loop
            and on_request is None
            and len(self.requests) == 1
            and not spec.stream
        )
        self.fast_sink = make_sink(counted=max_requests is not None)
        """FastConnection's buffer of plain 200s (see :meth:`_fold`); ``until`` (the time it may buffer responses
        until) and ``left`` (with a request count, how many more requests it may issue) are set by :meth:`_arm_fast`."""
        self.fast_data = self.requests[0] if self.fast else b""
        if self.fast:
            _numpy()  # import numpy (used to fold batches) now rather than inside the timed point
        self.conn_class = connection_class(
            capture=capture,
            stream=spec.stream,
            openai=spec.openai,
            pure_python=pure_python,
            no_body=spec.method.upper() == "HEAD",
            clock=clock if clock is not time.perf_counter else None,
            fast_driver=self if self.fast else None,
        )
        self.ssl_context = spec.ssl_context()
        self.fast_resend = self.closed_loop and max_requests is None
        self.sample = ReservoirSample(sample_capacity, seed)
        self.pacer = (
            Pacer(result.rate, result.arrivals or "constant", seed, offset=pacer_offset_s) if result.rate else None
        )
        self.start_at = start_at
        self.conns: set[Connection] = set()
        self.idle: list[Connection] = []
        self.pending: deque[float] = deque()
        self.connecting = 0
        self.issued = 0
        self.finished = 0
        self.stopping = False
        self.t0 = 0.0
        self.t_end_window = math.inf
        self.loop: asyncio.AbstractEventLoop | None = None
        self.done: asyncio.Future[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.pacer_timer: asyncio.TimerHandle | None = None
        self.next_housekeeping = 0.0
        self.next_progress = 0.0
        self.request_count = len(self.requests)
        self.first_open = True
        self.last_in_window: float | None = None
        self.window: list[float] = []
        self.window_end = -math.inf

    # ------------------------------------------------------------------ running
    async def run(self) -> PointResult:
        self.loop = asyncio.get_running_loop()
        self.done = self.loop.create_future()
        res = self.result
        if self.start_at is not None:
            # several generator processes start their share of the point together
            await asyncio.sleep(max(0.0, self.start_at - time.time()))
        cpu0 = _thread_busy_s()
        self.t0 = self.clock()
        if self.duration_s is not None:
            self.t_end_window = self.t0 + self.duration_s
        self.next_progress = self.t0 + self.progress_interval_s
        self._schedule_housekeeping()
        if self.closed_loop:
            assert res.concurrency is not None
            for worker in range(res.concurrency):
                self._issue(worker, None)
        else:
            self._pacer_tick()
        try:
            await self.done
        except asyncio.CancelledError:
            res.interrupted = True
            raise
        finally:
            t_done = self.clock()
            self._fold()
            self.fast_sink.until = -math.inf
            self.stopping = True
            for handle in (self.timer, self.pacer_timer):
                if handle is not None:
                    handle.cancel()
            for task in list(self.tasks):
                task.cancel()
            for conn in list(self.conns):
                conn.abort()
            window_end = min(t_done, self.t_end_window)
            if self.stop is not None and self.stop.is_set():
                res.interrupted = True
            res.duration_s = max(0.0, (window_end if self.duration_s is not None else t_done) - self.t0)
            if self.duration_s is None:
                res.completed_in_window = res.completed
                res.ok_in_window = res.ok
            res.elapsed_s = t_done - self.t0
            if self.last_in_window is not None:
                res.last_window_completion_s = self.last_in_window - self.t0
            cpu = _thread_busy_s() - cpu0
            res.client_cpu_fraction = cpu / res.elapsed_s if res.elapsed_s > 0 else math.nan
            res.sample_ms = self.sample.values
        return res

    def _finish(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def _maybe_finish(self) -> None:
        if self.stopping and self.finished >= self.issued and not self.pending and not self.connecting:
            self._finish()

    def _begin_stop(self) -> None:
        if self.stopping:
            return
        self._fold()
        self.fast_sink.until = -math.inf
        self.stopping = True
        if self.pacer_timer is not None:
            self.pacer_timer.cancel()
        # open loop: requests still waiting for a connection never get sent; their wait so far is a lower bound
        # on the latency a user would have seen, so it stays in the corrected histogram
        now = self.clock()
        while self.pending:
            intended = self.pending.popleft()
            self.result.unsent += 1
            self.result.latency.record(int((now - intended) * 1e6 + 0.5))
        self._maybe_finish()

    def _schedule_housekeeping(self) -> None:
        assert self.loop is not None
        interval = min(0.1, max(0.005, self.timeout_s / 20.0))
        self.next_housekeeping = self.clock() + interval
        self.timer = self.loop.call_later(interval, self._housekeeping)

    def _housekeeping(self) -> None:
        self._fold()
        now = self.clock()
        lag_ms = (now - self.next_housekeeping) * 1000.0
        if lag_ms > self.result.loop_lag_max_ms:
            self.result.loop_lag_max_ms = lag_ms
        if self.stop is not None and self.stop.is_set():
            self.result.interrupted = True
            self._begin_stop()
            self._abort_inflight(now)
        if now >= self.t_end_window or (
            self.pacer is not None
            and self.max_requests is not None
            and self.pacer.count >= self.max_requests
            and not self.pending
        ):
            self._begin_stop()
        timeout = self.timeout_s
        for conn in list(self.conns):
            if conn.busy and now - conn.t_send >= timeout:
                conn.busy = False
                self._record_failure(conn, taxonomy.READ_TIMEOUT, conn.t_send + timeout, conn.t_send + timeout)
                conn.abort()
        if self.on_progress is not None and now >= self.next_progress:
            self.next_progress = now + self.progress_interval_s
            self._report_progress(now)
        self._maybe_finish()
        self._schedule_housekeeping()

    def _abort_inflight(self, now: float) -> None:
        """Ctrl-C: in-flight requests end now, kept in the histogram at the time they took so far."""
        for conn in list(self.conns):
            if conn.busy:
                conn.busy = False
                self.finished += 1
                self.result.completed += 1
                self.result.latency.record(int((now - conn.t_intended) * 1e6 + 0.5))
                conn.abort()

    def _report_progress(self, now: float) -> None:
        assert self.on_progress is not None
        res = self.result
        elapsed = now - self.t0
        p50, p99 = res.latency.percentiles_us([50.0, 99.0]) if res.latency.count else (math.nan, math.nan)
        self.on_progress(
            Progress(
                label=res.label,
                elapsed_s=elapsed,
                duration_s=self.duration_s,
                requests=self.max_requests,
                completed=res.completed,
                errors=res.error_count,
                throughput_rps=res.completed / elapsed if elapsed > 0 else 0.0,
                p50_ms=p50 / 1000.0,
                p99_ms=p99 / 1000.0,
            )
        )

    # ------------------------------------------------------------------ issuing
    def _next_request(self) -> tuple[bytes, int]:
        index = self.issued
        self.issued += 1
        self.result.sent += 1
        self.fast_sink.left -= 1  # a request issued here comes out of the fast path's budget (--requests N)
        return self.requests[index % len(self.requests)], index

    def _issue(self, worker: int, conn: Connection | None) -> None:
        """Closed loop: the worker's next request, on its connection or a new one."""
        self._fold()  # (called later, after a failure: the count of issued requests must include the buffer)
        if self.stopping or (self.max_requests is not None and self.issued >= self.max_requests):
            if conn is not None:
                self.idle.append(conn)
            if not self.stopping and self.finished >= self.issued:
                self._begin_stop()
            self._maybe_finish()
            return
        data, index = self._next_request()
        if conn is not None and conn.reusable and not conn.closed:
            conn.send(data, 0.0, index)  # issue time = send time
        else:
            self._start_connect(worker, data, self.clock(), index)

    def _start_connect(self, worker: int, data: bytes | None, t_intended: float, index: int) -> None:
        assert self.loop is not None
        self.connecting += 1
        task = self.loop.create_task(self._connect(worker, data, t_intended, index))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _connect(self, worker: int, data: bytes | None, t_intended: float, index: int) -> None:
        assert self.loop is not None
        conn_class = self.conn_class
        try:
            try:
                _, proto = await asyncio.wait_for(
                    self.loop.create_connection(
                        lambda: conn_class(self, worker),
                        self.target.host,
                        self.target.port,
                        ssl=self.ssl_context,
                        server_hostname=self.target.host if self.ssl_context is not None else None,
                    ),
                    timeout=self.connect_timeout_s,
                )
            except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
                error_class = taxonomy.connect_error_class(exc)
                if isinstance(exc, asyncio.TimeoutError):
                    error_class = taxonomy.CONNECT_TIMEOUT
                self._connect_failed(worker, data, t_intended, index, error_class)
                return
        finally:
            self.connecting -= 1
        conn = proto
        self.conns.add(conn)
        if self.closed_loop:
            assert data is not None
            if self.stopping:
                self.finished += 1
                self.idle.append(conn)
                self._maybe_finish()
                return
            conn.send(data, t_intended, index)
        else:
            self._open_free(conn)

    def _connect_failed(self, worker: int, data: bytes | None, t_intended: float, index: int, error: str) -> None:
        now = self.clock()
        if self.closed_loop:
            self._count_failure(error, now - t_intended, now - t_intended, now, index, worker, t_intended, t_intended)
            assert self.loop is not None
            if not self.stopping:
                self.loop.call_later(CONNECT_RETRY_DELAY_S, self._issue, worker, None)
            else:
                self._maybe_finish()
        else:
            # the connect was made for the oldest waiting request: it fails with the connect error
            if self.pending:
                intended = self.pending.popleft()
                self.issued += 1
                self.result.sent += 1
                self._count_failure(
                    error, now - intended, now - t_intended, now, self.issued - 1, -1, intended, t_intended
                )
            self._maybe_finish()

    # ------------------------------------------------------------------ open loop
    def _pacer_tick(self) -> None:
        assert self.loop is not None and self.pacer is not None
        if self.stopping:
            return
        now = self.clock()
        elapsed = now - self.t0
        if self.duration_s is not None:
            # a point of D seconds at rate R schedules exactly the arrivals in [0, D)
            elapsed = min(elapsed, math.nextafter(self.duration_s, 0.0))
        due = self.pacer.due(elapsed, self.max_requests)
        lag = self.result.pacer_lag
        for offset in due:
            intended = self.t0 + offset
            if lag is not None:
                lag.record(int((now - intended) * 1e6 + 0.5))
            self._dispatch(intended)
        if self.max_requests is not None and self.pacer.count >= self.max_requests:
            self._begin_stop_when_drained()
            return
        if self.duration_s is not None and self.pacer.peek() >= self.duration_s:
            return  # schedule exhausted; housekeeping ends the point at the deadline
        delay = self.pacer.peek() - (self.clock() - self.t0)
        # never sleep less than the loop's timer resolution: due requests are dispatched together, and their
        # latency still counts from the schedule
        self.pacer_timer = self.loop.call_later(max(PACER_MIN_SLEEP_S, delay), self._pacer_tick)

    def _begin_stop_when_drained(self) -> None:
        """Open loop bounded by count: everything is scheduled; stop once the queue drains."""
        self.t_end_window = min(self.t_end_window, self.clock() + self.timeout_s)
        if not self.pending:
            self._begin_stop()

    def _dispatch(self, intended: float) -> None:
        while self.idle:
            conn = self.idle.pop()
            if conn.closed or not conn.reusable:
                continue
            data, index = self._next_request()
            conn.send(data, intended, index)
            return
        if len(self.pending) >= MAX_PENDING:
            # the client queue is full: this arrival is never sent (bounded memory in long overloaded runs)
            self.result.unsent += 1
            return
        self.pending.append(intended)
        if len(self.conns) + self.connecting < self.max_connections and self.connecting < len(self.pending):
            self._start_connect(-1, None, self.clock(), -1)

    def _open_free(self, conn: Connection) -> None:
        """Open loop: a connection is free; give it the oldest waiting request or park it."""
        if conn.closed or not conn.reusable:
            conn.close()
            if self.pending and len(self.conns) + self.connecting < self.max_connections:
                self._start_connect(-1, None, self.clock(), -1)
            return
        if self.pending and not self.stopping:
            intended = self.pending.popleft()
            data, index = self._next_request()
            conn.send(data, intended, index)
            return
        self.idle.append(conn)
        if self.stopping:
            self._maybe_finish()

    # ------------------------------------------------------------------ Driver protocol
    def _fold(self) -> None:
        """Count the fast path's buffered responses.

        They are 200s, each completed and replaced by a new request, inside the current one-second window and the
        measurement window, not among the first requests; their latencies are in order (the deterministic sample
        sees the same sequence as one-by-one recording would give it).
        """
        sink = self.fast_sink
        if not sink:
            return
        buf = sink.take()
        n = len(buf)
        res = self.result
        self.issued += n
        res.sent += n
        self.finished += n
        res.completed += n
        res.completed_in_window += n
        res.ok += n
        res.ok_in_window += n
        res.status_counts[200] = res.status_counts.get(200, 0) + n
        self.last_in_window = sink.last
        total_us, peak_us = res.latency.record_seconds_batch(buf)
        if peak_us > res.ok_max_us:
            res.ok_max_us = peak_us
        window = self.window
        window[0] += n
        window[2] += total_us
        if peak_us > window[3]:
            window[3] = peak_us
        self.sample.add_batch(buf, _ms_of_seconds)

    def _arm_fast(self) -> None:
        """Let FastConnection buffer responses until the current window ends (after the first requests)."""
        if self.fast and not self.stopping and not self.first_open:
            self.fast_sink.until = min(self.window_end, self.t_end_window)
            if self.max_requests is not None:
                self.fast_sink.left = self.max_requests - self.issued

    def on_response(self, conn: Connection) -> None:
        # the general path (FastConnection buffers the plainest responses without calling this)
        if self.fast_sink:
            self._fold()
        now = self.clock()
        res = self.result
        status = conn.status
        latency_us = int((now - conn.t_intended) * 1e6 + 0.5)
        res.latency.record(latency_us)
        if res.latency_from_send is not None:
            res.latency_from_send.record(int((now - conn.t_send) * 1e6 + 0.5))
        self.finished += 1
        res.completed += 1
        counts = res.status_counts
        counts[status] = counts.get(status, 0) + 1
        in_window = now <= self.t_end_window
        if in_window:
            res.completed_in_window += 1
            self.last_in_window = now
        elif self.closed_loop and not self.stopping:
            # the measurement window is over: issue nothing more (rather than until the next housekeeping tick)
            self._begin_stop()
        error: str | None = None
        if status >= 400:
            error = taxonomy.status_class(status)
            assert error is not None
            res.errors[error] = res.errors.get(error, 0) + 1
        else:
            res.ok += 1
            if in_window:
                res.ok_in_window += 1
            if latency_us > res.ok_max_us:
                res.ok_max_us = latency_us
        sample = self.sample
        if now < self.window_end and not self.first_open and sample.seen + 1 < sample.next_replace:
            # the common case, inlined: same 1 s window, the sample skips this value
            sample.seen += 1
            window = self.window
            window[0] += 1
            if error is not None:
                window[1] += 1
            window[2] += latency_us
            if latency_us > window[3]:
                window[3] = latency_us
        else:
            self._window(now, latency_us, error is not None)
        if conn.captures:
            self._record_extras(conn, now, error)  # type: ignore[arg-type]
        elif self.on_request is not None:
            self._emit(conn, now, status, error, {}, {})
        if self.fast_resend and conn.reusable and not self.stopping:
            index = self.issued
            self.issued = index + 1
            res.sent += 1
            conn.send(self.requests[index % self.request_count], 0.0, index)
            if self.fast:
                self._arm_fast()
            return
        self._after(conn)
        if self.fast:
            self._arm_fast()

    def _window(self, now: float, latency_us: int, failed: bool) -> None:
        res = self.result
        latency_ms = latency_us / 1000.0
        if self.first_open:
            if not res.first_latencies_ms:
                res.first_completion_s = now - self.t0
            res.first_latencies_ms.append(latency_ms)
            self.first_open = len(res.first_latencies_ms) < FIRST_REQUESTS
        sample = self.sample
        if sample.seen < sample.capacity or sample.seen + 1 == sample.next_replace:
            sample.add(latency_ms)
        else:
            sample.seen += 1
        if now >= self.window_end:
            slot = min(int((now - self.t0) / WINDOW_S), MAX_WINDOWS - 1)
            windows = res.windows
            while len(windows) <= slot:
                windows.append([0.0, 0.0, 0.0, 0.0])
            self.window = windows[slot]
            self.window_end = math.inf if slot == MAX_WINDOWS - 1 else self.t0 + (slot + 1) * WINDOW_S
        window = self.window
        window[0] += 1
        if failed:
            window[1] += 1
        window[2] += latency_us
        if latency_us > window[3]:
            window[3] = latency_us

    def _record_extras(self, conn: HeaderConnection, now: float, error: str | None) -> None:
        res = self.result
        headers = conn.headers
        stages: dict[str, float] = {}
        if headers:
            stages = stages_from_headers(headers)
            for name, value_ms in stages.items():
                hist = res.stages.get(name)
                if hist is None:
                    if len(res.stages) >= MAX_STAGES:
                        continue
                    hist = res.stages[name] = Histogram()
                hist.record(int(value_ms * 1000.0 + 0.5))
            total = server_total_ms(stages)
            if total is not None:
                if res.network is None:
                    res.network = Histogram()
                res.network.record(int((now - conn.t_send) * 1e6 - total * 1000.0 + 0.5))
        ttft_s: float | None = None
        tokens = 0
        if conn.has_state and isinstance(conn, StreamConnection):
            tokens = conn.output_tokens
            if res.ttft is None:
                res.ttft = Histogram()
                res.itl = Histogram()
            assert res.itl is not None
            if conn.tokens:
                ttft_s = conn.t_first_token - conn.t_intended
                res.ttft.record(int(ttft_s * 1e6 + 0.5))
                if res.latency_from_send is not None:
                    if res.ttft_from_send is None:
                        res.ttft_from_send = Histogram()
                    res.ttft_from_send.record(int((conn.t_first_token - conn.t_send) * 1e6 + 0.5))
                record = res.itl.record
                for gap in conn.gaps:
                    record(int(gap * 1e6 + 0.5))
                res.output_tokens += tokens
                if error is None:
                    res.stream_ok += 1
        if self.on_request is not None:
            self._emit(conn, now, conn.status, error, headers, stages, ttft_s, tokens)

    def _emit(
        self,
        conn: Connection,
        now: float,
        status: int,
        error: str | None,
        headers: Mapping[str, str],
        stages: Mapping[str, float],
        ttft_s: float | None = None,
        tokens: int = 0,
    ) -> None:
        assert self.on_request is not None
        self.on_request(
            RequestOutcome(
                index=conn.index,
                worker=conn.worker,
                intended_s=conn.t_intended - self.t0,
                sent_s=conn.t_send - self.t0,
                latency_s=now - conn.t_intended,
                latency_from_send_s=now - conn.t_send,
                status=status,
                error=error,
                headers=dict(headers),
                stages_ms=dict(stages),
                ttft_s=ttft_s,
                output_tokens=tokens,
            )
        )

    def _after(self, conn: Connection) -> None:
        if not conn.reusable:
            conn.close()
        if self.closed_loop:
            if self.stopping:
                self._maybe_finish()
                return
            self._issue(conn.worker, conn)
        else:
            self._open_free(conn)

    def on_failure(self, conn: Connection, error_class: str) -> None:
        self._fold()
        now = self.clock()
        self._record_failure(conn, error_class, now, now)
        conn.reusable = False

    def _record_failure(self, conn: Connection, error_class: str, t_end: float, t_end_send: float) -> None:
        self._count_failure(
            error_class,
            t_end - conn.t_intended,
            t_end_send - conn.t_send,
            t_end,
            conn.index,
            conn.worker,
            conn.t_intended,
            conn.t_send,
        )
        conn.reusable = False
        if self.closed_loop and not self.stopping:
            # the connection is dead; the worker continues on a new one once this one is closed
            assert self.loop is not None
            self.loop.call_soon(self._issue, conn.worker, None)
        self._maybe_finish()

    def _count_failure(
        self,
        error_class: str,
        latency_s: float,
        from_send_s: float,
        now: float,
        index: int,
        worker: int,
        t_intended: float,
        t_send: float,
    ) -> None:
        self._fold()
        res = self.result
        self.finished += 1
        res.completed += 1
        if now <= self.t_end_window:
            res.completed_in_window += 1
            self.last_in_window = now
        res.errors[error_class] = res.errors.get(error_class, 0) + 1
        latency_us = int(latency_s * 1e6 + 0.5)
        res.latency.record(latency_us)
        if res.latency_from_send is not None:
            res.latency_from_send.record(int(from_send_s * 1e6 + 0.5))
        self._window(now, latency_us, True)
        if self.on_request is not None:
            self.on_request(
                RequestOutcome(
                    index=index,
                    worker=worker,
                    intended_s=t_intended - self.t0,
                    sent_s=t_send - self.t0,
                    latency_s=latency_s,
                    latency_from_send_s=from_send_s,
                    status=0,
                    error=error_class,
                )
            )
        if self.closed_loop and not self.stopping and now > self.t_end_window:
            self._begin_stop()  # the measurement window is over: no reconnect, no more requests

    def on_closed(self, conn: Connection) -> None:
        self._fold()
        self.conns.discard(conn)
        if not self.closed_loop and self.pending and not self.stopping and not self.conns and not self.connecting:
            self._start_connect(-1, None, self.clock(), -1)
        self._maybe_finish()


def _thread_busy_s() -> float:
    """Seconds the current thread ran or waited to run.

    From ``/proc/thread-self/schedstat`` (CPU + run-queue wait, so a generator starved by other processes counts
    as busy) where the kernel keeps schedstats, else the thread's CPU time.
    """
    try:
        with open("/proc/thread-self/schedstat", encoding="ascii") as fh:
            fields = fh.read().split()
        ran, waited = int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return time.thread_time()
    if ran == 0:  # schedstats switched off in this kernel
        return time.thread_time()
    return (ran + waited) / 1e9


def point_label(concurrency: int | None, rate: float | None) -> str:
    """``c=8`` or ``r=100``."""
    if concurrency is not None:
        return f"c={concurrency}"
    return f"r={rate:g}"


async def run_point_async(
    spec: RequestSpec,
    *,
    concurrency: int | None = None,
    rate: float | None = None,
    arrivals: str = "constant",
    duration_s: float | None = 10.0,
    requests: int | None = None,
    timeout_s: float = 30.0,
    connect_timeout_s: float | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    seed: int = 0,
    sample_capacity: int = 5000,
    on_request: RequestCallback | None = None,
    on_progress: ProgressCallback | None = None,
    stop: StopSignal | None = None,
    pure_python_parser: bool = False,
    progress_interval_s: float = 0.25,
    label: str | None = None,
    processes: int = 1,
    pacer_offset_s: float = 0.0,
    start_at: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> PointResult:
    """Run one load level inside a running event loop; see :func:`run_point`.

    ``processes > 1`` splits the point over that many generator processes (this one included) that start
    together and whose histograms are merged (:mod:`.multiproc`); ``on_request`` then is not available and
    ``on_progress`` sees this process's share. ``pacer_offset_s`` and ``start_at`` are for those processes.
    ``clock`` (monotonic seconds) times everything; tests inject a fake one.
    """
    if processes > 1:
        from infradoctor.load.multiproc import run_point_processes

        return await run_point_processes(
            spec,
            processes=processes,
            concurrency=concurrency,
            rate=rate,
            arrivals=arrivals,
            duration_s=duration_s,
            requests=requests,
            timeout_s=timeout_s,
            connect_timeout_s=connect_timeout_s,
            max_connections=max_connections,
            seed=seed,
            sample_capacity=sample_capacity,
            on_request=on_request,
            on_progress=on_progress,
            stop=stop,
            pure_python_parser=pure_python_parser,
            progress_interval_s=progress_interval_s,
            label=label,
        )
    if (concurrency is None) == (rate is None):
        raise ValueError("give exactly one of concurrency (closed loop) or rate (open loop)")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if duration_s is None and requests is None:
        raise ValueError("bound the point with duration_s or requests")
    if timeout_s <= 0:
        raise ValueError("timeout_s must be positive")
    open_loop = rate is not None
    result = PointResult(
        label=label or point_label(concurrency, rate),
        mode="open" if open_loop else "closed",
        concurrency=concurrency,
        rate=rate,
        arrivals=arrivals if open_loop else None,
        timeout_s=timeout_s,
        latency_from_send=Histogram() if open_loop else None,
        pacer_lag=Histogram() if open_loop else None,
    )
    run = _PointRun(
        spec,
        result,
        duration_s=duration_s,
        max_requests=requests,
        connect_timeout_s=connect_timeout_s or timeout_s,
        max_connections=max_connections,
        seed=seed,
        sample_capacity=sample_capacity,
        on_request=on_request,
        on_progress=on_progress,
        stop=stop,
        pure_python=pure_python_parser,
        progress_interval_s=progress_interval_s,
        pacer_offset_s=pacer_offset_s,
        start_at=start_at,
        clock=clock,
    )
    return await run.run()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop event loop when uvloop is installed, else the default one."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def run_sync(coro: Any) -> Any:
    """Run a coroutine to completion on a fresh (uvloop when available) event loop."""
    loop = new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def run_point(spec: RequestSpec, **options: Any) -> PointResult:
    """Run one load level on its own event loop and return what it measured.

    Give ``concurrency=N`` (closed loop) or ``rate=R`` (open loop, ``arrivals='constant'|'poisson'``), bounded by
    ``duration_s`` and/or ``requests``; ``timeout_s`` is the per-request timeout. ``on_request`` gets a
    :class:`RequestOutcome` per request, ``on_progress`` a :class:`Progress` a few times a second, and ``stop``
    (a :class:`StopSignal`) ends the point early. Other options: see :func:`run_point_async`.
    """
    result: PointResult = run_sync(run_point_async(spec, **options))
    return result


def merge_points(points: Sequence[PointResult]) -> Histogram:
    """The latency histogram of several points together."""
    return Histogram.merged(p.latency for p in points)
