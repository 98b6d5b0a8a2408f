"""``infradoctor load --router-stats/--server-metrics``: the load sweep's point observer.

:class:`TelemetryObserver` fits the load package's ``PointObserver`` seam (``infradoctor.load.sweep``): it is told
when each point starts and ends, returns what the router and model servers reported during the point (stored in
``metrics.points[].observations["telemetry"]``), and after the sweep gives the findings: the R rules over each
router's own word for the whole run, and S010-S013 over each server point by point. The observations are cut
when the point ends (the reads up to then; the sampler reads every ``interval_s``); the findings use the exact
windows, with the reads after each point's end. It reads the load point duck-typed (``label``, ``concurrency``,
``rate``, ``ok``, ``elapsed_s``, the ``latency`` and ``ttft`` histograms), so this package does not import load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from infradoctor.findings import Finding
from infradoctor.telemetry.evidence import router_window, server_window
from infradoctor.telemetry.sampler import DEFAULT_INTERVAL_S, DEFAULT_TIMEOUT_S
from infradoctor.telemetry.sweep import SweepTelemetry

NAME = "telemetry"
"""Key of the observations in each load point."""


def _ms(histogram: Any, pct: float) -> float | None:
    if histogram is None or not getattr(histogram, "count", 0):
        return None
    return float(histogram.percentiles_us([pct])[0]) / 1000.0


class TelemetryObserver:
    """Samples ``--router-stats`` and ``--server-metrics`` over a load sweep, point by point."""

    name = NAME

    def __init__(self, router_stats: Sequence[str] = (), server_metrics: Sequence[str] = (), *,
                 interval_s: float = DEFAULT_INTERVAL_S, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.telemetry = SweepTelemetry(router_stats, server_metrics, interval_s=interval_s, timeout_s=timeout_s)
        self._started = False
        self._point_start = 0.0
        self.notes: list[tuple[str, str]] = []
        """``(source, message)`` per endpoint that could not be read, after :meth:`findings`."""

    def start(self) -> None:
        """Read every endpoint once and start sampling (bounded; call before the sweep to have a 'before')."""
        if not self._started:
            self._started = True
            self.telemetry.start()

    def point_started(self, label: str, level: float, mode: str) -> None:
        """A point is about to run (in the event loop: only a timestamp, the sampler has its own thread)."""
        if not self._started:  # started late: no waiting for the first reads inside the event loop
            self._started = True
            if self.telemetry.sampler is not None:
                self.telemetry.sampler.start(wait_first=False)
        sampler = self.telemetry.sampler
        self._point_start = sampler.now() if sampler is not None else 0.0

    def point_finished(self, point: Any) -> Mapping[str, Any] | None:
        """The point ended: the router and servers as read during it (plain JSON)."""
        sampler = self.telemetry.sampler
        if sampler is None:
            return None
        elapsed = getattr(point, "elapsed_s", None)
        self.telemetry.point_done(
            str(getattr(point, "label", "")), concurrency=getattr(point, "concurrency", None),
            rate=getattr(point, "rate", None), requests=int(getattr(point, "ok", 0) or 0),
            p50_ms=_ms(getattr(point, "latency", None), 50.0), p99_ms=_ms(getattr(point, "latency", None), 99.0),
            ttft_p99_ms=_ms(getattr(point, "ttft", None), 99.0), elapsed_s=elapsed,
        )
        last = self.telemetry.points[-1]
        readings = dict(sampler.readings)
        return {
            "routers": [router_window(u, readings.get(u, []), last.start_s, last.end_s).to_dict()
                        for u in self.telemetry.router_stats],
            "servers": [server_window(u, readings.get(u, []), last.start_s, last.end_s).to_dict()
                        for u in self.telemetry.server_metrics],
        }

    def findings(self, metrics: Any = None) -> Sequence[Finding]:
        """Stop sampling; the R findings from the routers' word and S010-S013 from the servers', point by point."""
        points = getattr(metrics, "points", None) or ()
        requests = sum(int(getattr(p, "completed", 0) or getattr(p, "sent", 0) or 0) for p in points) or None
        errors: dict[str, int] = {}
        for p in points:
            for cls, n in (getattr(p, "errors", None) or {}).items():
                errors[cls] = errors.get(cls, 0) + int(n)
        outcome = self.telemetry.finish(client_requests=requests, client_errors=errors)
        self.notes = outcome.notes
        return outcome.findings
