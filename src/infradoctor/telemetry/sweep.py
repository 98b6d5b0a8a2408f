"""Router and model-server telemetry over a load sweep, point by point: the seam ``infradoctor load`` uses.

The load command makes a :class:`SweepTelemetry` from ``--router-stats``/``--server-metrics``, calls
:meth:`~SweepTelemetry.start` before the first point, :meth:`~SweepTelemetry.point_done` from its per-point hook
with the client's numbers, and :meth:`~SweepTelemetry.finish` at the end: the typed metrics
(:class:`SweepTelemetryMetrics`), the findings of the R rules (over the router's word for the whole run) and the
S010-S013 rules (over each server, point by point), and a note per endpoint that could not be read. The sampler
runs on its own thread; nothing here waits on the load generator or makes it wait.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from infradoctor.findings import Finding, rank_findings, run_rules
from infradoctor.metrics import Metrics
from infradoctor.telemetry.evidence import (
    RouterEvidence,
    RouterWindow,
    ServerEvidence,
    ServerPoint,
    router_window,
    server_window,
)
from infradoctor.telemetry.sampler import DEFAULT_INTERVAL_S, DEFAULT_TIMEOUT_S, Sampler, sampler_for


@dataclass(frozen=True)
class ServerSweep(Metrics):
    """One model server over the sweep."""

    source: str
    """The metrics URL."""
    kind: str
    """Server kind (``vllm``, ``tgi``, ``triton``, ...)."""
    points: tuple[ServerPoint, ...] = ()
    """Per point: the client's latency beside the server's queue, batch, KV cache and preemptions."""


@dataclass(frozen=True)
class SweepTelemetryMetrics(Metrics):
    """Routers' and model servers' own metrics over a load sweep."""

    routers: tuple[RouterWindow, ...] = ()
    """Each router over the whole sweep."""
    router_points: tuple[tuple[RouterWindow, ...], ...] = ()
    """Each router per point (same order as ``routers``)."""
    servers: tuple[ServerSweep, ...] = ()
    """Each model server, point by point."""


@dataclass
class SweepTelemetryOutcome:
    """What :meth:`SweepTelemetry.finish` returns."""

    metrics: SweepTelemetryMetrics
    """For the result's ``metrics``."""
    findings: list[Finding] = field(default_factory=list)
    """R and S findings from the routers' and servers' own word."""
    notes: list[tuple[str, str]] = field(default_factory=list)
    """``(source, message)`` per endpoint that could not be read (or only in part)."""


@dataclass(frozen=True)
class _Point:
    label: str
    concurrency: int | None
    rate: float | None
    requests: int
    p50_ms: float | None
    p99_ms: float | None
    ttft_p99_ms: float | None
    start_s: float
    end_s: float


class SweepTelemetry:
    """Samples the endpoints over a sweep and cuts the readings at each point's boundaries."""

    def __init__(
        self,
        router_stats: Sequence[str] = (),
        server_metrics: Sequence[str] = (),
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        sampler: Sampler | None = None,
    ) -> None:
        self.router_stats = tuple(router_stats)
        self.server_metrics = tuple(server_metrics)
        self.sampler = sampler or sampler_for(self.router_stats, self.server_metrics, interval_s=interval_s,
                                              timeout_s=timeout_s)
        self.points: list[_Point] = []
        self._start_s = 0.0
        self._last_end_s = 0.0

    @property
    def active(self) -> bool:
        """True when there is anything to sample."""
        return self.sampler is not None

    def start(self) -> None:
        """Read every endpoint once (bounded) and start sampling."""
        if self.sampler is not None:
            self.sampler.start(wait_first=True)
            self._start_s = self._last_end_s = self.sampler.now()

    def point_done(
        self,
        label: str,
        *,
        concurrency: int | None = None,
        rate: float | None = None,
        requests: int = 0,
        p50_ms: float | None = None,
        p99_ms: float | None = None,
        ttft_p99_ms: float | None = None,
        elapsed_s: float | None = None,
    ) -> None:
        """A point finished just now (``elapsed_s`` long; default: since the previous one ended)."""
        if self.sampler is None:
            return
        end = self.sampler.now()
        start = max(self._last_end_s, end - elapsed_s) if elapsed_s is not None else self._last_end_s
        self.sampler.mark(label)
        self.points.append(_Point(label, concurrency, rate, requests, p50_ms, p99_ms, ttft_p99_ms, start, end))
        self._last_end_s = end

    def finish(
        self, *, client_requests: int | None = None, client_errors: Mapping[str, int] | None = None
    ) -> SweepTelemetryOutcome:
        """Stop sampling; the metrics, the findings and the notes."""
        if self.sampler is None:
            return SweepTelemetryOutcome(SweepTelemetryMetrics())
        end = self.sampler.now()
        readings = self.sampler.stop()
        routers = tuple(router_window(u, readings.get(u, []), self._start_s, end) for u in self.router_stats)
        router_points = tuple(tuple(router_window(u, readings.get(u, []), p.start_s, p.end_s) for p in self.points)
                              for u in self.router_stats)
        servers = []
        for url in self.server_metrics:
            points = tuple(
                ServerPoint(p.label, p.concurrency, p.rate, p.requests, p.p50_ms, p.p99_ms, p.ttft_p99_ms,
                            server_window(url, readings.get(url, []), p.start_s, p.end_s))
                for p in self.points
            )
            whole = server_window(url, readings.get(url, []), self._start_s, end)
            servers.append(ServerSweep(whole.source, whole.kind, points))
        findings: list[Finding] = []
        notes: list[tuple[str, str]] = []
        for window in routers:
            if window.kind == "unknown":
                notes.append(("router-stats", f"{window.source}: could not be read ({'; '.join(window.problems[:3])})"))
                continue
            if window.failed_reads:
                notes.append(("router-stats", f"{window.source}: {window.failed_reads} reads failed"))
            findings.extend(run_rules(RouterEvidence(window, client_requests=client_requests,
                                                     client_errors=dict(client_errors or {}))))
        for sweep in servers:
            if sweep.kind == "unknown":
                problems = next((p.server.problems for p in sweep.points if p.server.problems), ())
                notes.append(("server-metrics", f"{sweep.source}: could not be read ({'; '.join(problems[:3])})"))
                continue
            findings.extend(run_rules(ServerEvidence(sweep.source, sweep.kind, sweep.points)))
        metrics = SweepTelemetryMetrics(routers, router_points, tuple(servers))
        return SweepTelemetryOutcome(metrics, rank_findings(findings), notes)
