"""One load point spread over several generator processes, merged into one :class:`PointResult`.

A single Python event loop tops out at one CPU core. With ``processes=P`` the point's concurrency (or rate, or
request count) is split into P shares: P-1 child processes (``spawn``) and this process run one share each,
starting together at an agreed wall-clock time. Constant open-loop schedules are interleaved by giving share k the
offset k/rate, so together they form the exact constant schedule; Poisson shares use distinct seeds (a sum of
Poisson streams is Poisson). Histograms are merged count by count (:meth:`Histogram.merge`), so the merged
percentiles are exactly those of one histogram that saw every request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import multiprocessing
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

from infradoctor.load.engine import (
    PointResult,
    ProgressCallback,
    RequestCallback,
    StopSignal,
    point_label,
    run_point_async,
    run_sync,
)
from infradoctor.load.histogram import Histogram
from infradoctor.load.spec import RequestSpec

START_DELAY_S = 2.0
"""Head start the children get to import and reach the agreed start time."""


def split(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal non-negative integers, larger shares first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _hist_state(hist: Histogram | None) -> dict[str, object] | None:
    return hist.to_dict() if hist is not None else None


def _hist_from(state: Any) -> Histogram | None:
    return Histogram.from_dict(state) if state is not None else None


COUNTS = ("sent", "completed", "ok", "completed_in_window", "ok_in_window", "unsent", "cancelled", "output_tokens",
          "stream_ok")
"""A point's counts: each process counts its share, and the merged point adds them."""

SCALARS = ("label", "mode", "concurrency", "rate", "arrivals", "timeout_s", "duration_s", "elapsed_s", *COUNTS,
           "first_completion_s", "last_window_completion_s", "client_cpu_fraction", "loop_lag_max_ms", "interrupted",
           "unreachable")
"""A point's plain values, sent between processes as they are."""


def point_state(point: PointResult) -> dict[str, Any]:
    """Everything of a point as plain data (to send between processes)."""
    return {
        "scalars": {name: getattr(point, name) for name in SCALARS},
        "errors": dict(point.errors),
        "status_counts": dict(point.status_counts),
        "latency": point.latency.to_dict(),
        "error_latency": point.error_latency.to_dict(),
        "latency_from_send": _hist_state(point.latency_from_send),
        "pacer_lag": _hist_state(point.pacer_lag),
        "network": _hist_state(point.network),
        "ttft": _hist_state(point.ttft),
        "ttft_from_send": _hist_state(point.ttft_from_send),
        "itl": _hist_state(point.itl),
        "stages": {name: hist.to_dict() for name, hist in point.stages.items()},
        "first_latencies_ms": list(point.first_latencies_ms),
        "windows": [list(w) for w in point.windows],
    }


def point_from_state(state: dict[str, Any]) -> PointResult:
    """Inverse of :func:`point_state`."""
    point = PointResult(**state["scalars"])
    point.errors = dict(state["errors"])
    point.status_counts = {int(k): v for k, v in state["status_counts"].items()}
    point.latency = Histogram.from_dict(state["latency"])
    point.error_latency = Histogram.from_dict(state["error_latency"])
    point.latency_from_send = _hist_from(state["latency_from_send"])
    point.pacer_lag = _hist_from(state["pacer_lag"])
    point.network = _hist_from(state["network"])
    point.ttft = _hist_from(state["ttft"])
    point.ttft_from_send = _hist_from(state["ttft_from_send"])
    point.itl = _hist_from(state["itl"])
    point.stages = {name: Histogram.from_dict(h) for name, h in state["stages"].items()}
    point.first_latencies_ms = list(state["first_latencies_ms"])
    point.windows = [list(w) for w in state["windows"]]
    return point


def _merge_hist(a: Histogram | None, b: Histogram | None) -> Histogram | None:
    if a is None:
        return b
    if b is not None:
        a.merge(b)
    return a


def merge_points(points: list[PointResult], *, label: str, concurrency: int | None, rate: float | None) -> PointResult:
    """One point from the shares of several processes: counts add, histograms merge, the worst CPU counts."""
    first = points[0]
    merged = PointResult(
        label=label,
        mode=first.mode,
        concurrency=concurrency,
        rate=rate,
        arrivals=first.arrivals,
        timeout_s=first.timeout_s,
    )
    for point in points:
        for name in COUNTS:
            setattr(merged, name, getattr(merged, name) + getattr(point, name))
        merged.duration_s = max(merged.duration_s, point.duration_s)
        merged.elapsed_s = max(merged.elapsed_s, point.elapsed_s)
        if point.first_completion_s is not None:
            merged.first_completion_s = min(merged.first_completion_s or math.inf, point.first_completion_s)
        if point.last_window_completion_s is not None:
            merged.last_window_completion_s = max(
                merged.last_window_completion_s or 0.0, point.last_window_completion_s
            )
        merged.loop_lag_max_ms = max(merged.loop_lag_max_ms, point.loop_lag_max_ms)
        if math.isfinite(point.client_cpu_fraction):
            merged.client_cpu_fraction = (
                point.client_cpu_fraction
                if not math.isfinite(merged.client_cpu_fraction)
                else max(merged.client_cpu_fraction, point.client_cpu_fraction)
            )
        merged.interrupted = merged.interrupted or point.interrupted
        merged.unreachable = merged.unreachable or point.unreachable
        for key, count in point.errors.items():
            merged.errors[key] = merged.errors.get(key, 0) + count
        for status, count in point.status_counts.items():
            merged.status_counts[status] = merged.status_counts.get(status, 0) + count
        merged.latency.merge(point.latency)
        merged.error_latency.merge(point.error_latency)
        merged.latency_from_send = _merge_hist(merged.latency_from_send, point.latency_from_send)
        merged.pacer_lag = _merge_hist(merged.pacer_lag, point.pacer_lag)
        merged.network = _merge_hist(merged.network, point.network)
        merged.ttft = _merge_hist(merged.ttft, point.ttft)
        merged.ttft_from_send = _merge_hist(merged.ttft_from_send, point.ttft_from_send)
        merged.itl = _merge_hist(merged.itl, point.itl)
        for name, hist in point.stages.items():
            merged.stages[name] = _merge_hist(merged.stages.get(name), hist) or hist
        for index, window in enumerate(point.windows):
            while len(merged.windows) <= index:
                merged.windows.append([0.0, 0.0, 0.0, 0.0])
            target = merged.windows[index]
            target[0] += window[0]
            target[1] += window[1]
            target[2] += window[2]
            target[3] = max(target[3], window[3])
    merged.first_latencies_ms = list(first.first_latencies_ms)
    return merged


class _EventStop(StopSignal):
    """A stop signal shared between processes (a multiprocessing Event)."""

    def __init__(self, event: Any) -> None:
        super().__init__()
        self.event = event

    def set(self) -> None:
        self.event.set()

    def is_set(self) -> bool:
        return bool(self.event.is_set())


_CHILD_STOP: Any = None


@contextlib.contextmanager
def _children_ignore_ctrl_c() -> Iterator[None]:
    """Processes started inside start with SIGINT blocked, as multiprocessing's resource tracker does.

    A Ctrl-C to the process group while a child still imports (before :func:`_init_child` runs) would print its
    KeyboardInterrupt traceback and break the pool; the parent's Ctrl-C, blocked meanwhile, arrives when the block
    ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _init_child(event: Any) -> None:
    """Child start-up: Ctrl-C is the parent's business; the parent tells children to stop through ``event``."""
    global _CHILD_STOP
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _CHILD_STOP = event


def _child(spec: RequestSpec, options: dict[str, Any]) -> dict[str, Any]:
    stop = _EventStop(_CHILD_STOP) if _CHILD_STOP is not None else None
    point: PointResult = run_sync(run_point_async(spec, stop=stop, **options))
    return point_state(point)


async def run_point_processes(
    spec: RequestSpec,
    *,
    processes: int,
    concurrency: int | None,
    rate: float | None,
    duration_s: float | None,
    requests: int | None,
    seed: int,
    on_request: RequestCallback | None,
    on_progress: ProgressCallback | None,
    stop: StopSignal | None,
    label: str | None,
    arrivals: str = "constant",
    **options: Any,
) -> PointResult:
    """Run one point over ``processes`` generator processes; see the module docstring."""
    if on_request is not None:
        raise ValueError("on_request needs processes=1: outcomes of other processes are not streamed back")
    if concurrency is not None:
        shares: list[dict[str, Any]] = [{"concurrency": c} for c in split(concurrency, processes) if c > 0]
    else:
        assert rate is not None
        shares = [
            {"rate": rate / processes, "pacer_offset_s": k / rate if arrivals == "constant" else 0.0}
            for k in range(processes)
        ]
    if requests is not None:
        for share, count in zip(shares, split(requests, len(shares)), strict=True):
            share["requests"] = count
        shares = [s for s in shares if s.get("requests", 1) > 0]
    start_at = time.time() + START_DELAY_S
    common = {
        "duration_s": duration_s,
        "arrivals": arrivals,
        "start_at": start_at,
        **options,
    }
    common.setdefault("requests", None)
    loop = asyncio.get_running_loop()
    context = multiprocessing.get_context("spawn")
    with _children_ignore_ctrl_c():
        children_stop = context.Event()
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=max(1, len(shares) - 1), mp_context=context, initializer=_init_child, initargs=(children_stop,)
    ) as pool:
        with _children_ignore_ctrl_c():  # the pool starts its processes as work is submitted
            futures = [
                loop.run_in_executor(pool, _child, spec, {**common, **share, "seed": seed + k + 1})
                for k, share in enumerate(shares[1:])
            ]
        try:
            own = await run_point_async(
                spec, **{**common, **shares[0], "seed": seed}, on_progress=on_progress, stop=stop
            )
        except BaseException:
            children_stop.set()
            raise
        if own_interrupted(stop):
            children_stop.set()
        states = await asyncio.gather(*futures)
    points = [own, *(point_from_state(state) for state in states)]
    return merge_points(
        points,
        label=label or point_label(concurrency, rate),
        concurrency=concurrency,
        rate=rate,
    )


def own_interrupted(stop: StopSignal | None) -> bool:
    """True when the parent was told to stop (the children must stop too)."""
    return stop is not None and stop.is_set()
