"""``infradoctor load``: the load engine (closed and open loop), sweeps, knee, error taxonomy, streaming timing.

The command as a library: ``run(LoadOptions(url, concurrency=[1, 2, 4])) -> Result`` (typed metrics:
:class:`~infradoctor.load.metrics.LoadMetrics`). The engine underneath (used by ``load``, ``route`` and ``profile
--load-url``)::

    from infradoctor.load import RequestSpec, run_point, run_sweep

    spec = RequestSpec("http://127.0.0.1:8000/predict", method="POST", bodies=[b'{"x": 1}'])
    point = run_point(spec, concurrency=8, duration_s=5, timeout_s=2)      # closed loop
    point = run_point(spec, rate=200, arrivals="poisson", duration_s=5)    # open loop, CO-corrected
    sweep = run_sweep(spec, concurrency="auto", duration_s=2)              # 1, 2, 4, ... until the knee
    point.to_dict()["latency_ms"]["p99"], sweep.knee

Inside a running event loop use ``run_point_async`` / ``run_sweep_async``. ``on_request`` receives a
``RequestOutcome`` per request (status, latencies, error class, captured headers, Server-Timing stages);
``observers`` (:class:`~infradoctor.load.sweep.PointObserver`) watch each point of a sweep from the side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
    from infradoctor.load.command import LoadOptions, LoadRun, measure, run
    from infradoctor.load.engine import PointResult, Progress, RequestOutcome, StopSignal, run_point, run_point_async
    from infradoctor.load.histogram import Histogram
    from infradoctor.load.knee import Knee, find_knee
    from infradoctor.load.metrics import LoadMetrics
    from infradoctor.load.spec import RequestSpec
    from infradoctor.load.sweep import PointObserver, Slo, SweepResult, run_sweep, run_sweep_async

__getattr__ = lazy_exports(__name__, {
    "PointResult": "engine",
    "Progress": "engine",
    "RequestOutcome": "engine",
    "StopSignal": "engine",
    "run_point": "engine",
    "run_point_async": "engine",
    "Histogram": "histogram",
    "Knee": "knee",
    "find_knee": "knee",
    "LoadMetrics": "metrics",
    "LoadOptions": "command",
    "LoadRun": "command",
    "measure": "command",
    "run": "command",
    "PointObserver": "sweep",
    "RequestSpec": "spec",
    "Slo": "sweep",
    "SweepResult": "sweep",
    "run_sweep": "sweep",
    "run_sweep_async": "sweep",
})

__all__ = [
    "Histogram",
    "Knee",
    "LoadMetrics",
    "LoadOptions",
    "LoadRun",
    "PointObserver",
    "PointResult",
    "Progress",
    "RequestOutcome",
    "RequestSpec",
    "Slo",
    "StopSignal",
    "SweepResult",
    "find_knee",
    "measure",
    "run",
    "run_point",
    "run_point_async",
    "run_sweep",
    "run_sweep_async",
]
