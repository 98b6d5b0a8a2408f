"""The load engine's entry points: one load level (a *point*) in the closed or the open loop.

Closed loop (``concurrency=N``, :mod:`.closed_loop`): N workers, each owning one keep-alive connection, each
sending its next request as soon as the previous one completes; use it to find capacity and the knee. Open loop
(``rate=R``, :mod:`.open_loop`): requests are scheduled by a pacer regardless of responses, and latency counts from
the *intended* send time (coordinated-omission corrected). What every point shares (start, housekeeping, timeouts,
connects, giving up on a target where nothing connects) is :mod:`.driver`; what a request counts as is
:mod:`.accounting`; the definitions of the numbers are in :mod:`.point`.

Histograms are mergeable and bounded (:mod:`.histogram`), so a point of any length holds the same memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from infradoctor.load.accounting import RequestCallback
from infradoctor.load.closed_loop import ClosedLoopDriver
from infradoctor.load.driver import PointDriver, ProgressCallback
from infradoctor.load.histogram import Histogram
from infradoctor.load.open_loop import DEFAULT_MAX_CONNECTIONS, OpenLoopDriver
from infradoctor.load.point import PointResult, Progress, RequestOutcome, StopSignal, point_label
from infradoctor.load.spec import RequestSpec

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "PointResult",
    "Progress",
    "ProgressCallback",
    "RequestCallback",
    "RequestOutcome",
    "StopSignal",
    "new_event_loop",
    "point_label",
    "run_point",
    "run_point_async",
    "run_sync",
]


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
    common: dict[str, Any] = {
        "duration_s": duration_s,
        "max_requests": requests,
        "connect_timeout_s": connect_timeout_s or timeout_s,
        "on_request": on_request,
        "on_progress": on_progress,
        "stop": stop,
        "pure_python": pure_python_parser,
        "progress_interval_s": progress_interval_s,
        "start_at": start_at,
        "clock": clock,
    }
    run: PointDriver
    if open_loop:
        run = OpenLoopDriver(
            spec, result, max_connections=max_connections, seed=seed, pacer_offset_s=pacer_offset_s, **common
        )
    else:
        run = ClosedLoopDriver(spec, result, **common)
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
    """Run a coroutine to completion on a fresh (uvloop when available) event loop.

    A Ctrl-C whose ``KeyboardInterrupt`` is raised while a transport callback runs (a second Ctrl-C in ``load``,
    the first one in a library caller) is caught by uvloop, which prints "Fatal error on transport" with a
    traceback and carries on as if nothing happened. Here it cancels the run instead, nothing is printed, and
    the ``KeyboardInterrupt`` is raised from this call, as Ctrl-C anywhere else would be.
    """
    loop = new_event_loop()
    interrupts: list[BaseException] = []
    task = asyncio.ensure_future(coro, loop=loop)

    def on_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), (KeyboardInterrupt, SystemExit)):
            if not interrupts:
                interrupts.append(context["exception"])
                task.cancel()
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(on_error)
    try:
        result = loop.run_until_complete(task)
    except asyncio.CancelledError:
        if interrupts:
            raise interrupts[0] from None
        raise
    else:
        if interrupts:
            raise interrupts[0]
        return result
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
