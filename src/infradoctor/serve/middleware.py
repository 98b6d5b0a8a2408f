"""Pure ASGI middleware: request id, ``Server-Timing``, one JSON log line per request, opt-in Prometheus metrics.

Works with FastAPI, Starlette and any ASGI 3 application, streaming responses included::

    app = FastAPI()
    app.add_middleware(TimingMiddleware, metrics=ServeMetrics(), metrics_path="/metrics")

Per HTTP request it

- takes the request id from ``X-Request-ID`` (or the trace id of a W3C ``traceparent``), else generates one, makes it
  current for :func:`~infradoctor.serve.stage` timers and echoes it back as ``X-Request-ID``;
- adds ``Server-Timing`` to the response head with each stage finished so far and ``total`` (time to the response
  head); stages that end while a streaming body is sent appear in the log line and metrics, not the header;
- at the end logs one JSON line on the ``infradoctor.serve.access`` logger (INFO): request id, method, route, path,
  status, ``duration_ms`` (to the last body byte), ``ttfb_ms`` and ``stages``;
- with ``metrics``, observes latency per route and stage and tracks the in-flight gauge; with ``metrics_path`` it
  answers ``GET <metrics_path>`` with the exposition itself (not timed).

CUDA stages (``stage(name, cuda=True)``) still running when the request ends are resolved on a background thread
after the response is sent; the log line and metrics for such a request are emitted from that thread.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from infradoctor.serve.looplag import LoopLagMonitor
from infradoctor.serve.metrics import ServeMetrics
from infradoctor.serve.server_timing import format_server_timing
from infradoctor.serve.stages import RequestTiming, activate, deactivate

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ACCESS_LOGGER = "infradoctor.serve.access"
"""Logger that receives one JSON line per request."""

MAX_ROUTE_LABELS = 200
"""Distinct route names kept for labels; beyond it (raw paths of an app without routing) they become ``other``."""

MAX_REQUEST_ID_LENGTH = 128
"""Longer incoming ``X-Request-ID`` values are ignored and a fresh id is generated."""

_HEX = frozenset("0123456789abcdef")


def request_id_from_headers(headers: list[tuple[bytes, bytes]] | Any) -> str | None:
    """The id a client sent: ``X-Request-ID`` (visible ASCII, at most 128 chars) or a ``traceparent``'s trace id."""
    traceparent: bytes | None = None
    for key, value in headers:
        if key == b"x-request-id":
            if 0 < len(value) <= MAX_REQUEST_ID_LENGTH and all(33 <= b <= 126 for b in value):
                return str(value.decode("ascii"))
        elif key == b"traceparent":
            traceparent = value
    if traceparent is not None:
        parts = traceparent.decode("latin-1").strip().lower().split("-")
        if len(parts) >= 4 and len(parts[1]) == 32 and set(parts[1]) <= _HEX and parts[1] != "0" * 32:
            return parts[1]
    return None


def new_request_id() -> str:
    """A fresh random request id (32 hex digits, like a trace id; unique, not secret)."""
    return f"{random.getrandbits(128):032x}"  # the module's generator is reseeded in forked children


def route_of(scope: Scope) -> str | None:
    """The route template a Starlette/FastAPI router matched (``/items/{item_id}``), when one did."""
    route = scope.get("route")
    if route is None:
        return None
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    return str(path) if path else None


class _CudaResolver:
    """One daemon thread that waits for the CUDA events of finished requests, then finishes their records."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[RequestTiming, Callable[[], None]]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="infradoctor-cuda-resolver", daemon=True)
        self._thread.start()

    def submit(self, timing: RequestTiming, finish: Callable[[], None]) -> None:
        self._queue.put((timing, finish))

    def _run(self) -> None:
        while True:
            timing, finish = self._queue.get()
            try:
                timing.resolve_all()
            except Exception:  # a failed device must not kill the resolver; the stage is dropped
                logging.getLogger(__name__).warning("could not resolve CUDA stage timings", exc_info=True)
                timing.pending = []
            finish()


_resolver: _CudaResolver | None = None
_resolver_lock = threading.Lock()


def _cuda_resolver() -> _CudaResolver:
    global _resolver
    with _resolver_lock:
        if _resolver is None:
            _resolver = _CudaResolver()
        return _resolver


class TimingMiddleware:
    """ASGI middleware that times requests stage by stage (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: ServeMetrics | None = None,
        metrics_path: str | None = None,
        logger: logging.Logger | None = None,
        log_level: int = logging.INFO,
        server_timing: bool = True,
        loop_monitor: LoopLagMonitor | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        """Wrap ``app``.

        Args:
            app: the ASGI application.
            metrics: Prometheus metrics to record into (None: no metrics).
            metrics_path: answer ``GET`` on this path with the metrics exposition (needs ``metrics``).
            logger: logger for the per-request JSON line (default ``infradoctor.serve.access``).
            log_level: level of that line; nothing is formatted when the logger would drop it.
            server_timing: add the ``Server-Timing`` header.
            loop_monitor: an event-loop lag monitor to start on the first request (it needs the running loop).
            clock: nanosecond monotonic clock (tests inject one).
        """
        if metrics_path is not None and metrics is None:
            raise ValueError("metrics_path needs metrics=ServeMetrics(...)")
        self.app = app
        self.metrics = metrics
        self.metrics_path = metrics_path
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)
        self.log_level = log_level
        self.server_timing = server_timing
        self.loop_monitor = loop_monitor
        self.clock = clock
        self._routes: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.metrics_path is not None and scope["path"] == self.metrics_path and scope["method"] == "GET":
            await self._send_metrics(send)
            return
        monitor = self.loop_monitor
        if monitor is not None and not monitor.running:
            monitor.start()

        request_id = request_id_from_headers(scope["headers"]) or new_request_id()
        timing = RequestTiming(request_id, clock=self.clock)
        metrics = self.metrics
        if metrics is not None:
            metrics.in_flight.inc()
        state: dict[str, Any] = {"status": 0, "ttfb_ms": None}
        server_timing = self.server_timing

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                ttfb_ms = state["ttfb_ms"] = timing.elapsed_ms()
                headers = list(message.get("headers", ()))
                headers.append((b"x-request-id", request_id.encode("latin-1")))
                if server_timing:
                    timing.resolve_ready()
                    headers.append(
                        (b"server-timing", format_server_timing(timing.durations, ttfb_ms).encode("latin-1"))
                    )
                message = {**message, "headers": headers}
            await send(message)

        token = activate(timing)
        try:
            await self.app(scope, receive, send_wrapper)
        except BaseException:
            if not state["status"]:
                state["status"] = 500
            raise
        finally:
            deactivate(token)
            duration_ms = timing.elapsed_ms()
            if metrics is not None:
                metrics.in_flight.dec()

            def finish() -> None:
                self._finish(scope, timing, state["status"], duration_ms, state["ttfb_ms"])

            if timing.pending:
                timing.resolve_ready()
            if timing.pending:
                _cuda_resolver().submit(timing, finish)
            else:
                finish()

    def _route_label(self, scope: Scope) -> str:
        route = route_of(scope)
        if route is not None:
            return route
        path = str(scope.get("path", ""))
        if path in self._routes:
            return path
        if len(self._routes) < MAX_ROUTE_LABELS:
            self._routes.add(path)
            return path
        return "other"

    def _finish(self, scope: Scope, timing: RequestTiming, status: int, duration_ms: float, ttfb: float | None) -> None:
        route = self._route_label(scope)
        method = str(scope.get("method", ""))
        if self.metrics is not None:
            self.metrics.observe(route, method, status, duration_ms / 1000.0, timing.durations)
        if self.logger.isEnabledFor(self.log_level):
            line = {
                "event": "request",
                "request_id": timing.request_id,
                "method": method,
                "route": route,
                "path": scope.get("path", ""),
                "status": status,
                "duration_ms": round(duration_ms, 3),
                "ttfb_ms": None if ttfb is None else round(ttfb, 3),
                "stages": {name: round(ms, 3) for name, ms in timing.durations.items()},
            }
            # makeRecord + handle: the same as logger.log without findCaller's stack walk (the caller is always here)
            logger = self.logger
            logger.handle(logger.makeRecord(logger.name, self.log_level, __file__, 0,
                                            json.dumps(line, separators=(",", ":")), (), None))

    async def _send_metrics(self, send: Send) -> None:
        assert self.metrics is not None
        body, content_type = self.metrics.exposition()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", content_type.encode("latin-1")),
                            (b"content-length", str(len(body)).encode("latin-1"))],
            }
        )
        await send({"type": "http.response.body", "body": body})
