"""Router and model-server telemetry over a window of time: counters as deltas, gauges as series.

:func:`router_window` and :func:`server_window` summarise a target's readings between two times (the whole run,
or one load point): a counter's growth from the last reading at or before the start to the first at or after the
end (a counter that went backwards, a restart, is left out and said so), a gauge's readings inside the window
(max, mean, the series). The rules read :class:`RouterEvidence` (one router over the run, with what the client
saw) and :class:`ServerEvidence` (one model server, point by point of a sweep, beside the client's latency).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from infradoctor.metrics import Metrics
from infradoctor.telemetry.router import COUNTERS, GAUGES, HostState, RouterSnapshot
from infradoctor.telemetry.sampler import Reading
from infradoctor.telemetry.server import SERVER_COUNTERS, SERVER_GAUGES

MAX_SERIES_POINTS = 600
"""Gauge readings kept per series in the result (evenly thinned beyond)."""


@dataclass(frozen=True)
class GaugeSeries(Metrics):
    """One gauge over a window."""

    max: float
    """Largest reading."""
    mean: float
    """Mean of the readings."""
    last: float
    """Last reading."""
    series: tuple[tuple[float, float], ...] = ()
    """``(seconds since the sampler started, value)`` per reading (thinned to at most 600)."""


@dataclass(frozen=True)
class RouterWindow(Metrics):
    """A router's statistics over a window: what it counted and what its gauges showed."""

    source: str
    """The statistics URL as given (``format`` says which of its answers were read)."""
    kind: str
    """``envoy``, ``haproxy``, ``nginx``, ``traefik``, ``prometheus`` or ``unknown`` (nothing read)."""
    format: str
    """The answer's shape (``envoy-json+envoy-clusters-json``, ``haproxy-csv``, ...)."""
    reads: int
    """Reads that returned statistics."""
    failed_reads: int
    """Reads that did not."""
    start_s: float | None = None
    """Window start (seconds since the sampler started)."""
    end_s: float | None = None
    """Window end."""
    counters: dict[str, float] = field(default_factory=dict)
    """Growth of each canonical counter over the window (``retries``, ``pending_overflow``, ``panic``, ...)."""
    gauges: dict[str, GaugeSeries] = field(default_factory=dict)
    """Each canonical gauge over the window (``pending_active``, ``membership_healthy``, ...)."""
    limits: dict[str, float] = field(default_factory=dict)
    """Configured limits the router reported (circuit breakers, queue limits)."""
    hosts: tuple[HostState, ...] = ()
    """Upstream hosts at the last read, with per-host counters as growth over the window."""
    host_changes: tuple[str, ...] = ()
    """Hosts whose state changed during the window, added or gone (``b1: healthy -> failing at 3.1 s``)."""
    worst_states: dict[str, str] = field(default_factory=dict)
    """Per host (``group/name``) the worst state seen in any read of the window."""
    problems: tuple[str, ...] = ()
    """Why reads failed or were partial (distinct reasons, at most 10)."""


@dataclass(frozen=True)
class ServerWindow(Metrics):
    """A model server's state over a window."""

    source: str
    """The metrics URL read."""
    kind: str
    """``vllm``, ``sglang``, ``tgi``, ``triton``, ``torchserve``, ``ray``, ``infradoctor`` or ``unknown``."""
    reads: int
    """Reads that returned metrics."""
    failed_reads: int = 0
    """Reads that did not."""
    waiting_max: float | None = None
    """Largest waiting-queue reading (requests)."""
    waiting_mean: float | None = None
    """Mean waiting queue."""
    running_max: float | None = None
    """Largest running batch (requests)."""
    running_mean: float | None = None
    """Mean running batch."""
    kv_cache_usage_max: float | None = None
    """Largest KV-cache usage (0-1)."""
    preemptions: float | None = None
    """Preemptions during the window."""
    queue_time_ms: float | None = None
    """Mean server-side queue time of the requests finished in the window (ms)."""
    ttft_ms: float | None = None
    """Mean server-side time to first token in the window (ms)."""
    request_time_ms: float | None = None
    """Mean server-side request time in the window (ms)."""
    batch_size_mean: float | None = None
    """Triton: batch items per model execution in the window."""
    requests_finished: float | None = None
    """Requests the server finished in the window."""
    names: dict[str, str] = field(default_factory=dict)
    """Canonical value -> the server's metric name it was read from."""
    problems: tuple[str, ...] = ()
    """Why reads failed or were partial."""


def _thin(series: Sequence[tuple[float, float]], limit: int = MAX_SERIES_POINTS) -> tuple[tuple[float, float], ...]:
    if len(series) <= limit:
        return tuple((round(t, 3), v) for t, v in series)
    step = len(series) / limit
    return tuple((round(series[int(i * step)][0], 3), series[int(i * step)][1]) for i in range(limit))


def _bracket(
    readings: Sequence[Reading], start: float | None, end: float | None
) -> tuple[list[Reading], Reading | None, Reading | None]:
    """Readings inside the window, the last at or before its start and the first at or after its end."""
    inside = [r for r in readings if (start is None or r.at_s >= start) and (end is None or r.at_s <= end)]
    before = [r for r in readings if start is not None and r.at_s <= start]
    after = [r for r in readings if end is not None and r.at_s >= end]
    first = before[-1] if before else (inside[0] if inside else None)
    last = after[0] if after else (inside[-1] if inside else None)
    return inside, first, last


def _delta(first: Mapping[str, float], last: Mapping[str, float], key: str, problems: list[str]) -> float | None:
    if key not in first or key not in last:
        return None
    growth = last[key] - first[key]
    if growth < 0:
        problems.append(f"{key} went backwards (the router or server restarted?)")
        return None
    return growth


def _gauge(values: Sequence[tuple[float, float]]) -> GaugeSeries:
    numbers = [v for _, v in values]
    return GaugeSeries(max(numbers), statistics.fmean(numbers), numbers[-1], _thin(values))


def _problems(readings: Sequence[Reading], extra: Sequence[str] = ()) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for r in readings:
        problem = r.error or (r.router.problem if r.router else None) or (r.server.problem if r.server else None)
        if problem:
            seen.setdefault(problem[:300])
    for p in extra:
        seen.setdefault(p)
    return tuple(list(seen)[:10])


_STATE_RANK = {"healthy": 0, "unknown": 0, "draining": 1, "failing": 2, "ejected": 3, "maint": 3, "down": 4}


def router_window(source: str, readings: Sequence[Reading], start: float | None = None,
                  end: float | None = None) -> RouterWindow:
    """A router's readings summarised over ``[start, end]`` (the whole run when both are None)."""
    ok = [r for r in readings if r.router is not None]
    inside, first, last = _bracket(ok, start, end)
    problems: list[str] = []
    failed = sum(1 for r in readings if r.router is None and (start is None or r.at_s >= start)
                 and (end is None or r.at_s <= end))
    if first is None or last is None or first.router is None or last.router is None:
        return RouterWindow(source, "unknown", "", 0, failed, start, end, problems=_problems(readings))
    counters: dict[str, float] = {}
    for key in sorted(COUNTERS):
        growth = _delta(first.router.values, last.router.values, key, problems)
        if growth is not None:
            counters[key] = growth
    gauges: dict[str, GaugeSeries] = {}
    window = inside or [last]
    for key in sorted(GAUGES):
        series = [(r.at_s, r.router.values[key]) for r in window if r.router is not None and key in r.router.values]
        if series:
            gauges[key] = _gauge(series)
    first_hosts = {(h.group, h.name): h for h in first.router.hosts}
    hosts = []
    for host in last.router.hosts:
        before = first_hosts.get((host.group, host.name))
        grown = {k: v - before.counters.get(k, 0.0) if before else v for k, v in host.counters.items()}
        hosts.append(HostState(host.name, host.address, host.group, host.state, host.flags,
                               {k: v for k, v in grown.items() if v >= 0}))
    changes: list[str] = []
    worst: dict[str, str] = {}
    previous: dict[tuple[str, str], str] = {}
    for r in [first, *window]:
        assert r.router is not None
        current = {(h.group, h.name): h.state for h in r.router.hosts}
        if previous:
            for host_key in current.keys() - previous.keys():
                changes.append(f"{host_key[1]}: added at {r.at_s:.1f} s")
            for host_key in previous.keys() - current.keys():
                changes.append(f"{host_key[1]}: gone at {r.at_s:.1f} s")
            for host_key, state in current.items():
                if host_key in previous and previous[host_key] != state:
                    changes.append(f"{host_key[1]}: {previous[host_key]} -> {state} at {r.at_s:.1f} s")
        for host_key, state in current.items():
            label = f"{host_key[0]}/{host_key[1]}"
            if _STATE_RANK.get(state, 0) >= _STATE_RANK.get(worst.get(label, "healthy"), 0):
                worst[label] = state
        previous = current
    return RouterWindow(
        source=source or last.router.source,
        kind=last.router.kind,
        format=last.router.format,
        reads=len(inside) or 1,
        failed_reads=failed,
        start_s=start,
        end_s=end,
        counters=counters,
        gauges=gauges,
        limits=dict(last.router.limits),
        hosts=tuple(hosts),
        host_changes=tuple(dict.fromkeys(changes))[:50],
        worst_states=worst,
        problems=_problems(readings, problems),
    )


def server_window(source: str, readings: Sequence[Reading], start: float | None = None,
                  end: float | None = None) -> ServerWindow:
    """A model server's readings summarised over ``[start, end]``."""
    ok = [r for r in readings if r.server is not None]
    inside, first, last = _bracket(ok, start, end)
    failed = sum(1 for r in readings if r.server is None and (start is None or r.at_s >= start)
                 and (end is None or r.at_s <= end))
    if first is None or last is None or first.server is None or last.server is None:
        return ServerWindow(source, "unknown", 0, failed, problems=_problems(readings))
    problems: list[str] = []
    window = [r.server for r in (inside or [last]) if r.server is not None]

    def gauge(key: str) -> list[float]:
        return [s.values[key] for s in window if key in s.values]

    growth = {k: _delta(first.server.values, last.server.values, k, problems) for k in sorted(SERVER_COUNTERS)}

    def mean_ms(prefix: str) -> float | None:
        total, count = growth.get(f"{prefix}_sum"), growth.get(f"{prefix}_count")
        return None if total is None or not count else 1000.0 * total / count

    waiting, running, kv = gauge("waiting"), gauge("running"), gauge("kv_cache_usage")
    items, executions = growth.get("batch_items"), growth.get("batch_executions")
    assert all(k in SERVER_GAUGES for k in ("waiting", "running", "kv_cache_usage"))
    return ServerWindow(
        source=source or last.server.source,
        kind=last.server.kind,
        reads=len(inside) or 1,
        failed_reads=failed,
        waiting_max=max(waiting) if waiting else None,
        waiting_mean=statistics.fmean(waiting) if waiting else None,
        running_max=max(running) if running else None,
        running_mean=statistics.fmean(running) if running else None,
        kv_cache_usage_max=max(kv) if kv else None,
        preemptions=growth.get("preemptions"),
        queue_time_ms=mean_ms("queue_time_s"),
        ttft_ms=mean_ms("ttft_s"),
        request_time_ms=mean_ms("request_time_s"),
        batch_size_mean=items / executions if items is not None and executions else None,
        requests_finished=growth.get("requests_finished"),
        names=dict(last.server.names),
        problems=_problems(readings, problems),
    )


@dataclass(frozen=True)
class ServerPoint(Metrics):
    """One load point: what the client measured and the server's state meanwhile."""

    label: str
    """``c=8`` or ``r=50/s``."""
    concurrency: int | None
    """Closed loop: client workers (requests in flight)."""
    rate: float | None
    """Open loop: offered requests per second."""
    client_requests: int
    """Requests the client completed in the point."""
    client_p50_ms: float | None
    """Client latency p50 (ms)."""
    client_p99_ms: float | None
    """Client latency p99 (ms)."""
    client_ttft_p99_ms: float | None
    """Client time to first token p99 (ms; streaming)."""
    server: ServerWindow
    """The server during the point."""

    @property
    def latency_p99_ms(self) -> float | None:
        """TTFT p99 where streamed, else latency p99: the client's view the rules tie to the server's state."""
        return self.client_ttft_p99_ms if self.client_ttft_p99_ms is not None else self.client_p99_ms

    @property
    def latency_name(self) -> str:
        """``p99 TTFT`` or ``p99 latency``."""
        return "p99 TTFT" if self.client_ttft_p99_ms is not None else "p99 latency"


@dataclass(frozen=True)
class ServerEvidence:
    """One model server over a sweep (or a single window), point by point beside the client's latency."""

    source: str
    """The metrics URL."""
    kind: str
    """The server kind."""
    points: tuple[ServerPoint, ...]
    """In the order they ran."""


@dataclass(frozen=True)
class RouterEvidence:
    """One router's own statistics over a run, and what the client saw through it."""

    window: RouterWindow
    """The router over the run."""
    client_requests: int | None = None
    """Requests the client sent through the router in the run (None when unknown)."""
    client_errors: Mapping[str, int] = field(default_factory=dict)
    """The client's failed routed requests by class (``http_503``, ...)."""
    backend_names: Mapping[str, str] = field(default_factory=dict)
    """The router's host names mapped to the ``--backend`` URLs they are (``b1`` -> ``http://10.0.0.6:8000``)."""
    added_p50_ms: float | None = None
    """Router-added latency at p50 the client measured (route only)."""


def dump_evidence(snapshot: RouterSnapshot) -> RouterEvidence:
    """Evidence from one saved statistics dump (``curl .../stats?format=json > envoy.json``), for ``logs``.

    A dump holds counters since the router started, so the window runs from zero to the dump: growth is the whole
    count; gauges are their one reading; host states are those at the dump. Use::

        from infradoctor.telemetry import parse_router_stats
        from infradoctor.telemetry.evidence import dump_evidence
        findings = run_rules(dump_evidence(parse_router_stats(Path(f).read_bytes(), f)))

    The same R rules as for live statistics run over it (R003, R005, R009, R010, R013).
    """
    zero = RouterSnapshot(snapshot.kind, snapshot.source, dict.fromkeys(snapshot.values, 0.0), snapshot.limits,
                          tuple(HostState(h.name, h.address, h.group, "healthy", "", dict.fromkeys(h.counters, 0.0))
                                for h in snapshot.hosts), snapshot.format)
    readings = [Reading(0.0, 0.0, router=zero), Reading(0.0, 0.0, router=snapshot)]
    window = router_window(snapshot.source, readings)
    return RouterEvidence(replace(window, host_changes=(), reads=1))
