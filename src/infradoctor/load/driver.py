"""What every point does whatever its loop: start, housekeeping (timeouts, progress, Ctrl-C), connects, the end.

:class:`PointDriver` implements the connections' ``Driver`` protocol and hands each outcome to its
:class:`~infradoctor.load.accounting.PointAccounting`; what happens next (send again, take a waiting request, park
the connection) is the loop's business: :class:`~infradoctor.load.closed_loop.ClosedLoopDriver` and
:class:`~infradoctor.load.open_loop.OpenLoopDriver` fill in the hooks.

A target where nothing connects is given up: when no connection has succeeded and connects keep failing for
:data:`UNREACHABLE_GRACE_S`, the point ends there (``PointResult.unreachable``) and the sweep after it.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections.abc import Callable
from typing import Any

from infradoctor.load import taxonomy
from infradoctor.load.accounting import PointAccounting, RequestCallback
from infradoctor.load.client import Connection, connection_class
from infradoctor.load.point import PointResult, Progress, StopSignal
from infradoctor.load.spec import RequestSpec

UNREACHABLE_GRACE_S = 0.5
"""A point where connects fail and none has succeeded for this long is given up: nothing listens there."""

ProgressCallback = Callable[[Progress], None]


class PointDriver:
    """Drives one point; the loop-specific parts are the hooks at the end (see the subclasses)."""

    closed_loop = False

    def __init__(
        self,
        spec: RequestSpec,
        result: PointResult,
        *,
        duration_s: float | None,
        max_requests: int | None,
        connect_timeout_s: float,
        on_request: RequestCallback | None = None,
        on_progress: ProgressCallback | None = None,
        stop: StopSignal | None = None,
        pure_python: bool = False,
        progress_interval_s: float = 0.25,
        start_at: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.clock = clock
        self.spec = spec
        self.result = result
        self.account = PointAccounting(result, on_request)
        self.target = spec.target
        self.requests = spec.wire_requests()
        self.request_count = len(self.requests)
        self.duration_s = duration_s
        self.max_requests = max_requests
        self.timeout_s = result.timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.on_progress = on_progress
        self.stop = stop
        self.progress_interval_s = progress_interval_s
        self.start_at = start_at
        fast_driver = self._prepare_fast_path(on_request)
        self.conn_class = connection_class(
            capture=frozenset(h.lower().encode("latin-1") for h in spec.capture_headers),
            stream=spec.stream,
            openai=spec.openai,
            pure_python=pure_python,
            no_body=spec.method.upper() == "HEAD",
            clock=clock if clock is not time.perf_counter else None,
            fast_driver=fast_driver,
        )
        self.ssl_context = spec.ssl_context()
        self.conns: set[Connection] = set()
        self.connecting = 0
        self.issued = 0
        """Requests handed to a connection (or to a connect for one)."""
        self.finished = 0
        """Requests done with, whatever became of them (the point ends when every issued one is)."""
        self.stopping = False
        self.connected = False
        """Some connection succeeded during the point."""
        self.connect_failures = 0
        self.t0 = 0.0
        self.t_end_window = math.inf
        self.loop: asyncio.AbstractEventLoop | None = None
        self.done: asyncio.Future[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.next_housekeeping = 0.0
        self.next_progress = 0.0

    # ------------------------------------------------------------------ running
    def begin(self, loop: asyncio.AbstractEventLoop, t0: float) -> None:
        """Set the point's clock origin and window (``run`` does this; tests driving by hand call it)."""
        self.loop = loop
        self.done = loop.create_future()
        self.t0 = t0
        if self.duration_s is not None:
            self.t_end_window = t0 + self.duration_s
        self.account.start(t0, self.t_end_window)
        self.next_progress = t0 + self.progress_interval_s

    async def run(self) -> PointResult:
        """Run the point to its end and return its result."""
        loop = asyncio.get_running_loop()
        res = self.result
        if self.start_at is not None:
            # several generator processes start their share of the point together
            await asyncio.sleep(max(0.0, self.start_at - time.time()))
        cpu0 = _thread_busy_s()
        self.begin(loop, self.clock())
        assert self.done is not None
        self._schedule_housekeeping()
        self._start()
        try:
            await self.done
        except asyncio.CancelledError:
            res.interrupted = True
            raise
        finally:
            t_done = self.clock()
            self._fold()
            self._closing()
            self.stopping = True
            if self.timer is not None:
                self.timer.cancel()
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
            if self.account.last_in_window is not None:
                res.last_window_completion_s = self.account.last_in_window - self.t0
            cpu = _thread_busy_s() - cpu0
            res.client_cpu_fraction = cpu / res.elapsed_s if res.elapsed_s > 0 else math.nan
        return res

    def _finish(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def _maybe_finish(self) -> None:
        if self.stopping and self.finished >= self.issued and not self.connecting and self._drained():
            self._finish()

    def _begin_stop(self) -> None:
        if self.stopping:
            return
        self._fold()
        self._closing()
        self.stopping = True
        self._stopped(self.clock())
        self._maybe_finish()

    def _give_up(self) -> None:
        """Nothing connects: end the point now, in-flight connects and all."""
        self.result.unreachable = True
        self._begin_stop()
        self._finish()

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
            self._cancel_inflight()
        if now >= self.t_end_window or self._schedule_done():
            self._begin_stop()
        if self.connect_failures and not self.connected and now - self.t0 >= UNREACHABLE_GRACE_S:
            self._give_up()
            return
        timeout = self.timeout_s
        for conn in list(self.conns):
            if conn.busy and now - conn.t_send >= timeout:
                conn.busy = False
                # an exchange of only interim (1xx) responses is not HTTP that completes
                error = taxonomy.PROTOCOL_ERROR if conn.interim else taxonomy.READ_TIMEOUT
                self._record_failure(conn, error, conn.t_send + timeout, conn.t_send + timeout)
                conn.abort()
        if self.on_progress is not None and now >= self.next_progress:
            self.next_progress = now + self.progress_interval_s
            self._report_progress(now)
        self._maybe_finish()
        self._schedule_housekeeping()

    def _cancel_inflight(self) -> None:
        """Ctrl-C: requests in flight end now, counted as cancelled (neither successes nor failures)."""
        for conn in list(self.conns):
            if conn.busy:
                conn.busy = False
                self.finished += 1
                self.result.cancelled += 1
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
                throughput_rps=res.ok / elapsed if elapsed > 0 else 0.0,
                p50_ms=p50 / 1000.0,
                p99_ms=p99 / 1000.0,
            )
        )

    # ------------------------------------------------------------------ connects
    def _next_request(self) -> tuple[bytes, int]:
        index = self.issued
        self.issued += 1
        self.result.sent += 1
        return self.requests[index % self.request_count], index

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
                self.connect_failures += 1
                self._connect_failed(worker, data, t_intended, index, error_class)
                if not self.connected and self.clock() - self.t0 >= UNREACHABLE_GRACE_S:
                    self._give_up()
                return
        finally:
            self.connecting -= 1
        self.connected = True
        self.conns.add(proto)
        self._connected(proto, worker, data, t_intended, index)

    # ------------------------------------------------------------------ Driver protocol
    def on_response(self, conn: Connection) -> None:
        """A final response completed on ``conn``."""
        self._fold()
        now = self.clock()
        self.finished += 1
        _, in_window = self.account.response(conn, now)
        if not in_window and self.closed_loop and not self.stopping:
            # the measurement window is over: issue nothing more (rather than until the next housekeeping tick)
            self._begin_stop()
        self._after_response(conn)

    def on_failure(self, conn: Connection, error_class: str) -> None:
        """The in-flight request on ``conn`` failed with a transport error class."""
        self._fold()
        now = self.clock()
        self._record_failure(conn, error_class, now, now)

    def _record_failure(self, conn: Connection, error_class: str, t_end: float, t_end_send: float) -> None:
        conn.reusable = False
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
        self._after_failure(conn)
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
        self.finished += 1
        in_window = self.account.failure(
            error_class, latency_s, from_send_s, now, index, worker, t_intended, t_send
        )
        if self.closed_loop and not self.stopping and not in_window:
            self._begin_stop()  # the measurement window is over: no reconnect, no more requests

    def on_closed(self, conn: Connection) -> None:
        """``conn`` is closed and will not be used again."""
        self._fold()
        self.conns.discard(conn)
        self._closed(conn)
        self._maybe_finish()

    # ------------------------------------------------------------------ hooks (the loops fill these in)
    def _prepare_fast_path(self, on_request: RequestCallback | None) -> Any:
        """Set up a fast path for the connections; its driver (see ``client.connection_class``), or None."""
        return None

    def _start(self) -> None:
        """Issue the first requests."""
        raise NotImplementedError

    def _fold(self) -> None:
        """Count responses a fast path buffered (closed loop)."""

    def _closing(self) -> None:
        """The point stops taking new work (close the fast path's window)."""

    def _stopped(self, now: float) -> None:
        """Issuing stopped at ``now`` (open loop: what still waits is unsent)."""

    def _drained(self) -> bool:
        """Nothing waits in the client for a connection."""
        return True

    def _schedule_done(self) -> bool:
        """Everything a request-bounded point was to send is sent and drained."""
        return False

    def _after_response(self, conn: Connection) -> None:
        """``conn`` is free after a response."""
        raise NotImplementedError

    def _after_failure(self, conn: Connection) -> None:
        """``conn``'s request failed; the connection is dead."""

    def _connected(self, conn: Connection, worker: int, data: bytes | None, t_intended: float, index: int) -> None:
        """A connect made for ``worker`` (closed loop) or the waiting queue (open loop) succeeded."""
        raise NotImplementedError

    def _connect_failed(self, worker: int, data: bytes | None, t_intended: float, index: int, error: str) -> None:
        """That connect failed with ``error``."""
        raise NotImplementedError

    def _closed(self, conn: Connection) -> None:
        """``conn`` closed (the pool may need a new one)."""


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
