"""The closed loop: N workers, each on its own keep-alive connection, sending again as soon as a response completes.

Latency counts from when the worker issued the request (connect time included when the connection had to be
opened). A closed loop slows down with the server, so it cannot show queueing that real independent users would
see (coordinated omission): use it to find capacity and the knee.

Its plainest case (one request, no per-request callback, no streaming) runs on a fast path: a ``200`` with
keep-alive is timed by appending one number to a sink and the next request is written at once
(:class:`~infradoctor.load.client.FastConnection`, compiled where built); :meth:`ClosedLoopDriver._fold` counts the
sink in batches, before anything else the driver handles and at every housekeeping tick.
"""

from __future__ import annotations

import math
from typing import Any

from infradoctor.load.accounting import RequestCallback
from infradoctor.load.client import Connection, make_sink
from infradoctor.load.driver import PointDriver
from infradoctor.load.histogram import _numpy

CONNECT_RETRY_DELAY_S = 0.001
"""Pause before a worker retries after a failed connect (avoids a busy spin on a dead port)."""


class ClosedLoopDriver(PointDriver):
    """Drives a closed-loop point (``result.concurrency`` workers)."""

    closed_loop = True

    def _prepare_fast_path(self, on_request: RequestCallback | None) -> Any:
        self.idle: list[Connection] = []
        """Connections parked once the point stopped issuing."""
        self.fast = on_request is None and self.request_count == 1 and not self.spec.stream
        """Plain 200s are recorded in batches (FastConnection); anything else goes one by one."""
        self.fast_sink = make_sink(counted=self.max_requests is not None)
        """FastConnection's buffer of plain 200s (see :meth:`_fold`); ``until`` (the time it may buffer responses
        until) and ``left`` (with a request count, how many more requests it may issue) are set by
        :meth:`_arm_fast`."""
        self.fast_data = self.requests[0] if self.fast else b""
        self.fast_resend = self.max_requests is None
        if self.fast:
            _numpy()  # import numpy (used to fold batches) now rather than inside the timed point
        return self if self.fast else None

    def _start(self) -> None:
        assert self.result.concurrency is not None
        for worker in range(self.result.concurrency):
            self._issue(worker, None)

    # ------------------------------------------------------------------ fast path
    def _fold(self) -> None:
        """Count the fast path's buffered responses (see :meth:`PointAccounting.fold`)."""
        sink = self.fast_sink
        if not sink:
            return
        buf = sink.take()
        n = len(buf)
        self.issued += n
        self.result.sent += n
        self.finished += n
        self.account.fold(buf, sink.last)

    def _arm_fast(self) -> None:
        """Let FastConnection buffer responses until the current window ends (after the first requests)."""
        if self.fast and not self.stopping and not self.account.first_open:
            self.fast_sink.until = min(self.account.window_end, self.t_end_window)
            if self.max_requests is not None:
                self.fast_sink.left = self.max_requests - self.issued

    def _closing(self) -> None:
        self.fast_sink.until = -math.inf

    # ------------------------------------------------------------------ issuing
    def _next_request(self) -> tuple[bytes, int]:
        self.fast_sink.left -= 1  # a request issued here comes out of the fast path's budget (--requests N)
        return super()._next_request()

    def _issue(self, worker: int, conn: Connection | None) -> None:
        """The worker's next request, on its connection or a new one."""
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

    def _after_response(self, conn: Connection) -> None:
        if self.fast_resend and conn.reusable and not self.stopping:
            data, index = self._next_request()
            conn.send(data, 0.0, index)
        else:
            if not conn.reusable:
                conn.close()
            if self.stopping:
                self._maybe_finish()
            else:
                self._issue(conn.worker, conn)
        if self.fast:
            self._arm_fast()

    def _after_failure(self, conn: Connection) -> None:
        if not self.stopping:
            # the connection is dead; the worker continues on a new one once this one is closed
            assert self.loop is not None
            self.loop.call_soon(self._issue, conn.worker, None)

    def _connected(self, conn: Connection, worker: int, data: bytes | None, t_intended: float, index: int) -> None:
        assert data is not None
        if self.stopping:
            self.finished += 1
            self.idle.append(conn)
            self._maybe_finish()
            return
        conn.send(data, t_intended, index)

    def _connect_failed(self, worker: int, data: bytes | None, t_intended: float, index: int, error: str) -> None:
        now = self.clock()
        self._count_failure(error, now - t_intended, now - t_intended, now, index, worker, t_intended, t_intended)
        if not self.stopping:
            assert self.loop is not None
            self.loop.call_later(CONNECT_RETRY_DELAY_S, self._issue, worker, None)
        else:
            self._maybe_finish()
