"""The accounting of one point: each outcome counted into its :class:`~infradoctor.load.point.PointResult`.

One place decides what a request counts as (see :mod:`.point` for the definitions): a successful response goes
into ``latency`` (and its window's latency sum), an HTTP error status or a transport failure into ``errors`` by
class and ``error_latency``; every one of them is completed, and inside the measurement window or not. The closed
loop's fast path hands its buffered plain 200s over in batches (:meth:`PointAccounting.fold`) with the same result
as one by one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from infradoctor.load import taxonomy
from infradoctor.load.client import Connection, HeaderConnection, StreamConnection
from infradoctor.load.histogram import Histogram
from infradoctor.load.point import FIRST_REQUESTS, MAX_WINDOWS, WINDOW_S, PointResult, RequestOutcome
from infradoctor.load.servertiming import server_total_ms, stages_from_headers

if TYPE_CHECKING:
    from collections.abc import Sequence

MAX_STAGES = 32
"""Distinct Server-Timing stage names tracked per point."""

RequestCallback = Callable[[RequestOutcome], None]


class PointAccounting:
    """Counts outcomes into ``result``; the driver tells it when the point starts and its window ends."""

    def __init__(self, result: PointResult, on_request: RequestCallback | None = None) -> None:
        self.result = result
        self.on_request = on_request
        self.t0 = 0.0
        """When the point started (clock seconds)."""
        self.t_end_window = math.inf
        """When the measurement window ends (inf when the point is bounded by a request count)."""
        self.window: list[float] = []
        """The current one-second window (``result.windows[slot]``)."""
        self.window_end = -math.inf
        """When the current window ends."""
        self.first_open = True
        """Still keeping the first successful responses' latencies verbatim."""
        self.last_in_window: float | None = None
        """Completion time of the last request finished inside the measurement window."""

    def start(self, t0: float, t_end_window: float) -> None:
        """The point starts now (``t0``); its measurement window ends at ``t_end_window``."""
        self.t0 = t0
        self.t_end_window = t_end_window

    # ------------------------------------------------------------------ outcomes
    def response(self, conn: Connection, now: float) -> tuple[str | None, bool]:
        """A final response completed on ``conn`` at ``now``: its error class (None for a success), in window."""
        res = self.result
        status = conn.status
        latency_us = int((now - conn.t_intended) * 1e6 + 0.5)
        counts = res.status_counts
        counts[status] = counts.get(status, 0) + 1
        in_window, window = self._complete(now)
        error: str | None = None
        if status >= 400:
            error = taxonomy.status_class(status)
            assert error is not None
            res.errors[error] = res.errors.get(error, 0) + 1
            res.error_latency.record(latency_us)
            window[1] += 1
        else:
            res.ok += 1
            if in_window:
                res.ok_in_window += 1
            res.latency.record(latency_us)
            if res.latency_from_send is not None:
                res.latency_from_send.record(int((now - conn.t_send) * 1e6 + 0.5))
            window[2] += latency_us
            if latency_us > window[3]:
                window[3] = latency_us
            if self.first_open:
                res.first_latencies_ms.append(latency_us / 1000.0)
                self.first_open = len(res.first_latencies_ms) < FIRST_REQUESTS
        if conn.captures:
            self._extras(conn, now, error)  # type: ignore[arg-type]
        elif self.on_request is not None:
            self._emit(conn, now, status, error, {}, {})
        return error, in_window

    def failure(
        self,
        error_class: str,
        latency_s: float,
        from_send_s: float,
        now: float,
        index: int,
        worker: int,
        t_intended: float,
        t_send: float,
    ) -> bool:
        """A request failed with a transport error class at ``now``; True when inside the measurement window."""
        res = self.result
        in_window, window = self._complete(now)
        res.errors[error_class] = res.errors.get(error_class, 0) + 1
        res.error_latency.record(int(latency_s * 1e6 + 0.5))
        window[1] += 1
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
        return in_window

    def fold(self, latencies_s: Sequence[float], last: float) -> None:
        """Count a batch of plain 200s from the closed loop's fast path.

        They are successes, each completed inside the current one-second window and the measurement window, after
        the first requests (so none of them is kept verbatim); ``last`` is when the last of them completed.
        """
        n = len(latencies_s)
        res = self.result
        res.completed += n
        res.completed_in_window += n
        res.ok += n
        res.ok_in_window += n
        res.status_counts[200] = res.status_counts.get(200, 0) + n
        self.last_in_window = last
        total_us, peak_us = res.latency.record_seconds_batch(latencies_s)
        window = self.window
        window[0] += n
        window[2] += total_us
        if peak_us > window[3]:
            window[3] = peak_us

    # ------------------------------------------------------------------ internals
    def _complete(self, now: float) -> tuple[bool, list[float]]:
        """One request completed at ``now``, whatever its outcome: (inside the measurement window, its window)."""
        res = self.result
        res.completed += 1
        in_window = now <= self.t_end_window
        if in_window:
            res.completed_in_window += 1
            self.last_in_window = now
        if res.first_completion_s is None:
            res.first_completion_s = now - self.t0
        window = self.window if now < self.window_end else self._advance(now)
        window[0] += 1
        return in_window, window

    def _advance(self, now: float) -> list[float]:
        """The window ``now`` falls in (created with any empty ones before it), made current."""
        slot = min(max(0, int((now - self.t0) / WINDOW_S)), MAX_WINDOWS - 1)
        windows = self.result.windows
        while len(windows) <= slot:
            windows.append([0.0, 0.0, 0.0, 0.0])
        self.window = windows[slot]
        self.window_end = math.inf if slot == MAX_WINDOWS - 1 else self.t0 + (slot + 1) * WINDOW_S
        return self.window

    def _extras(self, conn: HeaderConnection, now: float, error: str | None) -> None:
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
            if total is not None and error is None:
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
