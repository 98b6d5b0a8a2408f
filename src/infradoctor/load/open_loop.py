"""The open loop: requests scheduled by a :class:`~infradoctor.load.pacer.Pacer` regardless of responses.

Each arrival is dispatched to an idle connection from a pool (new connections opened on demand up to
``max_connections``; beyond that requests wait in a client queue). ``latency`` is measured from the *intended*
send time (coordinated-omission corrected), ``latency_from_send`` from when the bytes were written; both are kept.
Requests still waiting in the client queue when the point ends were never sent (``unsent``).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from typing import Any

from infradoctor.load.client import Connection
from infradoctor.load.driver import PointDriver
from infradoctor.load.pacer import Pacer
from infradoctor.load.point import PointResult
from infradoctor.load.spec import RequestSpec

PACER_MIN_SLEEP_S = 0.001
"""Shortest pacer sleep (event-loop timers have millisecond resolution; shorter sleeps busy-spin)."""
MAX_PENDING = 100_000
"""Most requests waiting for a free connection; later arrivals count as unsent (bounded memory)."""
DEFAULT_MAX_CONNECTIONS = 1024
"""Connection pool limit."""


class OpenLoopDriver(PointDriver):
    """Drives an open-loop point (``result.rate`` requests per second)."""

    def __init__(
        self,
        spec: RequestSpec,
        result: PointResult,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        seed: int = 0,
        pacer_offset_s: float = 0.0,
        **options: Any,
    ) -> None:
        super().__init__(spec, result, **options)
        assert result.rate is not None
        self.max_connections = max_connections
        self.pacer = Pacer(result.rate, result.arrivals or "constant", seed, offset=pacer_offset_s)
        self.idle: list[Connection] = []
        """Connections free for the next arrival."""
        self.pending: deque[float] = deque()
        """Intended times of arrivals waiting for a connection."""
        self.pacer_timer: asyncio.TimerHandle | None = None

    def _start(self) -> None:
        self._pacer_tick()

    def _closing(self) -> None:
        if self.pacer_timer is not None:
            self.pacer_timer.cancel()

    def _stopped(self, now: float) -> None:
        # requests still waiting for a connection never get sent: they have no response and no latency
        while self.pending:
            self.pending.popleft()
            self.result.unsent += 1

    def _drained(self) -> bool:
        return not self.pending

    def _schedule_done(self) -> bool:
        return self.max_requests is not None and self.pacer.count >= self.max_requests and not self.pending

    # ------------------------------------------------------------------ pacing
    def _pacer_tick(self) -> None:
        assert self.loop is not None
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
        """Bounded by count: everything is scheduled; stop once the queue drains."""
        self.t_end_window = min(self.t_end_window, self.clock() + self.timeout_s)
        self.account.t_end_window = self.t_end_window
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
        """A connection is free; give it the oldest waiting request or park it."""
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

    # ------------------------------------------------------------------ hooks
    def _after_response(self, conn: Connection) -> None:
        if not conn.reusable:
            conn.close()
        self._open_free(conn)

    def _connected(self, conn: Connection, worker: int, data: bytes | None, t_intended: float, index: int) -> None:
        self._open_free(conn)

    def _connect_failed(self, worker: int, data: bytes | None, t_intended: float, index: int, error: str) -> None:
        now = self.clock()
        # the connect was made for the oldest waiting request: it fails with the connect error
        if self.pending:
            intended = self.pending.popleft()
            self.issued += 1
            self.result.sent += 1
            self._count_failure(error, now - intended, now - t_intended, now, self.issued - 1, -1, intended, t_intended)
        self._maybe_finish()

    def _closed(self, conn: Connection) -> None:
        if self.pending and not self.stopping and not self.conns and not self.connecting:
            self._start_connect(-1, None, self.clock(), -1)
