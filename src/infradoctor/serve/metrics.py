"""Opt-in Prometheus metrics for the middleware, via prometheus_client.

Metrics (``infradoctor`` is the default namespace):

- ``infradoctor_request_duration_seconds{route,method,status}``: histogram of whole-request latency (to the last
  body byte).
- ``infradoctor_stage_duration_seconds{route,stage}``: histogram of each stage's duration.
- ``infradoctor_requests_in_flight``: gauge of requests being served now.

Each :class:`ServeMetrics` owns its own ``CollectorRegistry`` unless given one (pass
``prometheus_client.REGISTRY`` to expose them with the process-wide default metrics).

Several worker processes (``uvicorn --workers N``, gunicorn): set ``PROMETHEUS_MULTIPROC_DIR`` to an empty
directory before the server starts (prometheus_client reads it at import). Each worker then writes its values
there, and ``/metrics`` answered by any worker shows every worker's requests together (prometheus_client's
multiprocess mode; the in-flight gauge sums the live workers). Empty the directory between server runs; with
gunicorn, call ``prometheus_client.multiprocess.mark_process_dead(worker.pid)`` from its ``child_exit`` hook
(uvicorn has none: a worker it restarts leaves its last in-flight value behind). In this mode the exposition holds
what the workers wrote to the directory (every multiprocess metric there, not the registry's own collectors such
as ``python_info``). Without the variable, each worker exposes only its own numbers, and a scrape sees whichever
worker answered.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from infradoctor.errors import MissingExtraError

DEFAULT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0,
)
"""Histogram buckets in seconds: 1 ms to 30 s, dense where model latencies usually fall."""


class ServeMetrics:
    """Prometheus histograms per route and stage and an in-flight gauge."""

    def __init__(
        self,
        registry: Any | None = None,
        *,
        namespace: str = "infradoctor",
        buckets: Sequence[float] = DEFAULT_BUCKETS_S,
        multiprocess: bool | None = None,
    ) -> None:
        """Metrics in ``registry`` (a new one by default).

        ``multiprocess``: aggregate the workers sharing ``PROMETHEUS_MULTIPROC_DIR``; by default, when
        prometheus_client runs in its multiprocess mode (the variable was set when it was imported).
        """
        try:
            import prometheus_client
        except ImportError as exc:  # pragma: no cover - the serve extra installs it
            raise MissingExtraError("prometheus-client", "serve", "Prometheus metrics") from exc
        self._client = prometheus_client
        from prometheus_client import values

        if multiprocess is None:
            # decided once, at prometheus_client's import: values are then written to the directory
            multiprocess = values.ValueClass is not values.MutexValue
        if multiprocess:
            directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir")  # noqa: SIM112
            if not directory or not os.path.isdir(directory):
                raise ValueError(
                    f"Prometheus multiprocess mode needs PROMETHEUS_MULTIPROC_DIR to name an existing directory "
                    f"(got {directory!r})"
                )
        self.multiprocess = multiprocess
        """The exposition aggregates every worker's values from ``PROMETHEUS_MULTIPROC_DIR``."""
        self.registry = registry if registry is not None else prometheus_client.CollectorRegistry()
        """The registry the metrics are registered in and exposed from."""
        self.request_duration = prometheus_client.Histogram(
            f"{namespace}_request_duration_seconds",
            "Request latency from the first byte received to the last byte sent.",
            ("route", "method", "status"),
            buckets=tuple(buckets),
            registry=self.registry,
        )
        self.stage_duration = prometheus_client.Histogram(
            f"{namespace}_stage_duration_seconds",
            "Duration of each instrumented stage of a request.",
            ("route", "stage"),
            buckets=tuple(buckets),
            registry=self.registry,
        )
        self.in_flight = prometheus_client.Gauge(
            f"{namespace}_requests_in_flight",
            "Requests being served right now.",
            registry=self.registry,
            multiprocess_mode="livesum",  # (used only in multiprocess mode: the sum over live workers)
        )
        # Label lookups cost more than observations; children are cached per label tuple.
        self._request_children: dict[tuple[str, str, int], Any] = {}
        self._stage_children: dict[tuple[str, str], Any] = {}

    def observe(self, route: str, method: str, status: int, duration_s: float, stages: Mapping[str, float]) -> None:
        """Record one finished request; ``stages`` maps stage name to milliseconds."""
        key = (route, method, status)
        child = self._request_children.get(key)
        if child is None:
            child = self._request_children[key] = self.request_duration.labels(route, method, str(status))
        child.observe(duration_s)
        for name, ms in stages.items():
            skey = (route, name)
            schild = self._stage_children.get(skey)
            if schild is None:
                schild = self._stage_children[skey] = self.stage_duration.labels(route, name)
            schild.observe(ms / 1000.0)

    def exposition(self) -> tuple[bytes, str]:
        """The registry in the Prometheus text format (every worker's, in multiprocess mode), and its content type."""
        registry = self.registry
        if self.multiprocess:
            from prometheus_client import multiprocess

            registry = self._client.CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return self._client.generate_latest(registry), str(self._client.CONTENT_TYPE_LATEST)
