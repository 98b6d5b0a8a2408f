"""Instrumentation for model servers: stage timers, ASGI middleware, Prometheus metrics, event-loop lag, workers.

::

    from fastapi import FastAPI
    from infradoctor.serve import ServeMetrics, TimingMiddleware, stage

    app = FastAPI()
    app.add_middleware(TimingMiddleware, metrics=ServeMetrics(), metrics_path="/metrics")

    @app.post("/predict")
    async def predict(body: dict) -> dict:
        with stage("preprocess"):
            x = to_tensor(body)
        with stage("inference", cuda=True):
            y = model(x)
        return {"y": y.tolist()}

Each response carries ``X-Request-ID`` and ``Server-Timing: preprocess;dur=1.20, inference;dur=8.31, total;dur=9.9``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
    from infradoctor.serve.looplag import LoopLagEvidence, LoopLagMonitor, LoopStall, StackFrame
    from infradoctor.serve.metrics import ServeMetrics
    from infradoctor.serve.middleware import ACCESS_LOGGER, TimingMiddleware
    from infradoctor.serve.server_timing import format_server_timing
    from infradoctor.serve.stages import RequestTiming, Stage, current_timing, record, request_timing, stage
    from infradoctor.serve.workers import WorkerLayout, WorkerProcess, worker_layout

__getattr__ = lazy_exports(__name__, {
    "LoopLagEvidence": "looplag",
    "LoopLagMonitor": "looplag",
    "LoopStall": "looplag",
    "StackFrame": "looplag",
    "ServeMetrics": "metrics",
    "ACCESS_LOGGER": "middleware",
    "TimingMiddleware": "middleware",
    "format_server_timing": "server_timing",
    "RequestTiming": "stages",
    "Stage": "stages",
    "current_timing": "stages",
    "record": "stages",
    "request_timing": "stages",
    "stage": "stages",
    "WorkerLayout": "workers",
    "WorkerProcess": "workers",
    "worker_layout": "workers",
})

__all__ = [
    "ACCESS_LOGGER",
    "LoopLagEvidence",
    "LoopLagMonitor",
    "LoopStall",
    "RequestTiming",
    "ServeMetrics",
    "Stage",
    "StackFrame",
    "TimingMiddleware",
    "WorkerLayout",
    "WorkerProcess",
    "current_timing",
    "format_server_timing",
    "record",
    "request_timing",
    "stage",
    "worker_layout",
]
