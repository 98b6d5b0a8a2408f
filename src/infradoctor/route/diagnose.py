"""``infradoctor route`` as a library call: probe, analyse, apply the rules, build the result.

:func:`diagnose` runs the side probes (TCP connects, counters), the interleaved prober, then health checks and
counters again, and turns it all into a :class:`~infradoctor.result.Result` whose ``metrics`` layout is documented
in :mod:`infradoctor.route`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from infradoctor.errors import UsageError
from infradoctor.findings import run_rules
from infradoctor.load.engine import StopSignal, run_sync
from infradoctor.load.spec import RequestSpec
from infradoctor.result import ErrorNote, Result, new_result, utc_now_iso
from infradoctor.route.analysis import CONNECT_ERROR_CLASSES, BackendTarget, ProbeRun, analyze
from infradoctor.route.evidence import DIRECT, ROUTER, Bandwidth, HealthCheck, RouteEvidence
from infradoctor.route.metrics import RouteMetrics
from infradoctor.route.network import (
    HEALTH_PATHS,
    check_health,
    host_port,
    measure_bandwidth,
    probe_connects,
    read_counter,
    resolve_addresses,
)
from infradoctor.route.prober import (
    ALL_UNREACHABLE_GIVE_UP_S,
    ATTEMPT_HEADERS,
    UPSTREAM_HEADERS,
    ProbePath,
    ProbePlan,
    run_probe,
)
from infradoctor.route.rules import RuleOptions
from infradoctor.route.rules._common import DEFAULT_SLOW_MS
from infradoctor.route.rules.r001_router_overhead import MIN_ADDED_MS, host_allowance_ms
from infradoctor.route.sender import EngineSender
from infradoctor.route.stats import thin
from infradoctor.route.telemetry import (
    backend_aliases,
    merge_findings,
    telemetry_notes,
    unmapped_names_note,
    with_telemetry,
)
from infradoctor.telemetry.evidence import router_window, server_window
from infradoctor.telemetry.sampler import sampler_for

MAX_DISTRIBUTION_SAMPLES = 5000
"""Raw latencies kept per side in ``metrics.distributions``."""


@dataclass(frozen=True)
class RouteOptions:
    """Everything ``infradoctor route`` needs."""

    router: str
    """Router URL including the request path (e.g. ``http://lb:8080/v1/predict``)."""
    backends: tuple[str, ...]
    """Backend URLs; one without a path gets the router URL's path and query."""
    method: str = "GET"
    """HTTP method."""
    body: bytes | None = None
    """Request body."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra request headers."""
    concurrency: int = 4
    """In-flight requests through the router while its path is active."""
    direct_concurrency: int | None = None
    """In-flight requests to one backend on its direct path; None: ``ceil(concurrency / backends)``, the load the
    router gives each backend, so both paths see the backends equally loaded."""
    per_worker: int = 2
    """Requests per connection per slot."""
    duration_s: float = 10.0
    """Length of the interleaved measurement."""
    max_requests: int = 100_000
    """Request budget across all paths."""
    timeout_s: float = 30.0
    """Client timeout per request."""
    backend_header: str | None = None
    """Header naming the serving backend; None to auto-detect."""
    weights: tuple[float, ...] | None = None
    """Expected relative share per backend."""
    health_path: str | None = None
    """Health path to audit; None tries the usual ones."""
    counter_path: str | None = None
    """Backend request-counter path for retry detection."""
    connect_probes: int = 50
    """TCP connects per endpoint (0 to skip)."""
    iperf: bool = False
    """Measure bandwidth with iperf3 where a server answers."""
    iperf_port: int = 5201
    """iperf3 server port."""
    slow_ms: float = DEFAULT_SLOW_MS
    """Direct median from which backends count as slow (R002)."""
    seed: int = 0
    """Seed of the bootstrap."""
    stop: StopSignal | None = None
    """Set it (e.g. from a SIGINT handler) to end the measurement early with a partial result."""
    progress: Callable[[str], None] | None = None
    """Told what the measurement is doing, a line at a time (the CLI's live progress; None: silent)."""
    router_stats: tuple[str, ...] = ()
    """The router's statistics endpoints (``--router-stats``): Envoy admin, HAProxy stats or runtime API, nginx
    stub_status, a Prometheus endpoint; sampled before, during and after the run."""
    server_metrics: tuple[str, ...] = ()
    """Model servers' metrics endpoints (``--server-metrics``), sampled alike."""
    stats_interval_s: float = 1.0
    """Seconds between statistics reads."""
    stats_timeout_s: float = 1.0
    """Deadline of one statistics read."""


def backend_request_url(router: str, backend: str) -> str:
    """The URL requests to ``backend`` go to: its own path, or the router URL's path and query when it has none."""
    b = urlsplit(backend)
    if b.path not in ("", "/") or b.query:
        return backend
    r = urlsplit(router)
    return urlunsplit((b.scheme, b.netloc, r.path or "/", r.query, ""))


def direct_concurrency_for(options: RouteOptions) -> int:
    """Connections on a direct path: as given, or by default the share of the routed concurrency one backend gets."""
    if options.direct_concurrency is not None:
        return options.direct_concurrency
    return max(1, math.ceil(options.concurrency / len(options.backends)))


def validate(options: RouteOptions) -> None:
    """Raise UsageError for anything that cannot be probed."""
    for url in (options.router, *options.backends):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"not an http(s) URL: {url!r}")
        try:
            _ = parts.port
        except ValueError as exc:
            raise UsageError(f"bad port in {url!r}: {exc}") from None
    if not options.backends:
        raise UsageError("give at least one --backend URL")
    if len(set(options.backends)) != len(options.backends):
        raise UsageError("each --backend may be given once")
    if options.weights is not None and len(options.weights) != len(options.backends):
        raise UsageError(f"--weights has {len(options.weights)} values for {len(options.backends)} backends")
    if options.weights is not None and (any(w < 0 for w in options.weights) or sum(options.weights) <= 0):
        raise UsageError("--weights must be non-negative with a positive sum")
    if options.concurrency < 1 or options.per_worker < 1:
        raise UsageError("--concurrency must be at least 1")
    if options.direct_concurrency is not None and options.direct_concurrency < 1:
        raise UsageError("--direct-concurrency must be at least 1")
    if options.duration_s <= 0 or options.timeout_s <= 0:
        raise UsageError("--duration and --timeout must be positive")
    if not options.stats_interval_s > 0:
        raise UsageError("--stats-interval must be positive")
    for url in (*options.router_stats, *options.server_metrics):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https", "unix", "tcp") or not (parts.hostname or parts.path):
            raise UsageError(f"not a statistics URL (http(s)://, unix:// or tcp://): {url!r}")


def run(options: RouteOptions) -> Result:
    """``infradoctor route`` as a library call: measure router and backends, interleaved; the result with findings.

    No printing, no argv, no exit: the CLI turns argv into :class:`RouteOptions` and hands the result on.
    """
    return diagnose(options)


def diagnose(options: RouteOptions) -> Result:
    """Measure router and backends, interleaved, and return the result with findings (see :func:`run`)."""
    validate(options)
    started_at = utc_now_iso()
    t0 = time.perf_counter()
    errors: list[ErrorNote] = []
    targets = [BackendTarget(url, resolve_addresses(url)) for url in options.backends]
    endpoints = [(ROUTER, options.router), *((url, url) for url in options.backends)]
    stopped = options.stop.is_set if options.stop is not None else None
    if options.connect_probes > 0:
        _say(options, f"connect probes: {options.connect_probes} per endpoint")
    connect = (
        probe_connects(endpoints, count=options.connect_probes, stop=stopped) if options.connect_probes > 0 else []
    )
    before = {url: read_counter(url, options.counter_path) for url in options.backends} if options.counter_path else {}
    sampler = sampler_for(options.router_stats, options.server_metrics, interval_s=options.stats_interval_s,
                          timeout_s=options.stats_timeout_s)
    if sampler is not None:
        sampler.start(wait_first=True)
    window_start = sampler.now() if sampler is not None else 0.0
    try:
        run: ProbeRun = run_sync(_probe(options))
    finally:
        window_end = sampler.now() if sampler is not None else 0.0
        readings = sampler.stop() if sampler is not None else {}
    router_windows = [router_window(url, readings.get(url, []), window_start, window_end)
                      for url in options.router_stats]
    server_windows = [server_window(url, readings.get(url, []), window_start, window_end)
                      for url in options.server_metrics]
    aliases = backend_aliases(router_windows, targets)
    deltas: dict[str, int | None] = {}
    if options.counter_path:
        for url in options.backends:
            after = read_counter(url, options.counter_path)
            start = before.get(url)
            deltas[url] = None if after is None or start is None else after - start
            if deltas[url] is None:
                errors.append(ErrorNote("route.counter", f"could not read {options.counter_path} on {url}"))
    paths = (options.health_path,) if options.health_path else HEALTH_PATHS
    _say(options, "health checks")
    health: dict[str, HealthCheck] = {url: check_health(url, paths) for url in options.backends}
    bandwidth: list[Bandwidth] = []
    if options.iperf:
        _say(options, "iperf3 bandwidth")
        hosts = dict.fromkeys(host_port(url)[0] for url in options.backends)
        bandwidth = [measure_bandwidth(host, port=options.iperf_port) for host in hosts]
    evidence = analyze(
        run,
        router_url=options.router,
        targets=targets,
        weights=options.weights,
        health=health,
        counter_deltas=deltas,
        connect=connect,
        bandwidth=bandwidth,
        client_timeout_s=options.timeout_s,
        seed=options.seed,
        aliases=aliases,
    )
    evidence = with_telemetry(evidence, router_windows, server_windows, aliases)
    errors.extend(_notes(evidence))
    errors.extend(telemetry_notes(router_windows, server_windows))
    allowance = host_allowance_ms(evidence)
    if allowance > MIN_ADDED_MS:
        late = evidence.wakeup_delay_mean_ms or 0.0
        errors.append(ErrorNote("route.host", f"the host is short of CPU (the prober woke {late:.1f} ms late on "
                                f"average): router-added latency under {allowance:.1f} ms is not judged (R001); run "
                                "the probe on a host with CPU to spare"))
    unmapped = unmapped_names_note(evidence)
    if unmapped is not None:
        errors.append(unmapped)
    if run.gave_up:
        errors.append(
            ErrorNote(
                "route.unreachable",
                f"no path could be connected to for {ALL_UNREACHABLE_GIVE_UP_S:g} s; stopped after "
                f"{run.duration_s:.1f} s",
            )
        )
    if options.stop is not None and options.stop.is_set():
        errors.append(ErrorNote("route.interrupted", f"stopped early after {run.duration_s:.1f} s; partial result"))
    findings = run_rules(evidence, RuleOptions(slow_backend_ms=options.slow_ms))
    if evidence.router_stats is not None:
        findings = merge_findings(findings, run_rules(evidence.router_stats))
    for server in evidence.servers:
        findings = merge_findings(findings, run_rules(server))
    return new_result(
        "route",
        started_at=started_at,
        duration_s=time.perf_counter() - t0,
        target={"router": options.router, "backends": list(options.backends), "method": options.method.upper()},
        metrics=build_metrics(evidence, run, options).to_dict(),
        findings=findings,
        errors=errors,
    )


def _slot_progress(options: RouteOptions) -> Callable[[float, int, int], None] | None:
    say = options.progress
    if say is None:
        return None

    def after_slot(elapsed_s: float, routed: int, direct: int) -> None:
        say(f"routed vs direct {elapsed_s:4.1f}/{options.duration_s:g} s: {routed} routed, {direct} direct requests")

    return after_slot


def _say(options: RouteOptions, text: str) -> None:
    if options.progress is not None:
        options.progress(text)


async def _probe(options: RouteOptions) -> ProbeRun:
    capture = tuple(dict.fromkeys([*UPSTREAM_HEADERS, *ATTEMPT_HEADERS, *(
        [options.backend_header.lower()] if options.backend_header else []
    )]))
    direct_concurrency = direct_concurrency_for(options)
    # The backends run together in their slot, each at its share of the routed concurrency: the same requests
    # per connection make the slots last alike.
    direct_per_worker = options.per_worker
    paths = [ProbePath(ROUTER, ROUTER, options.router)]
    paths += [
        ProbePath(url, DIRECT, backend_request_url(options.router, url), direct_concurrency, direct_per_worker)
        for url in options.backends
    ]
    plan = ProbePlan(
        concurrency=options.concurrency,
        per_worker=options.per_worker,
        duration_s=options.duration_s,
        max_requests=options.max_requests,
        backend_header=options.backend_header,
        stop=options.stop.is_set if options.stop is not None else None,
        progress=_slot_progress(options),
    )

    def make_sender(url: str) -> EngineSender:
        spec = RequestSpec(
            url=url,
            method=options.method,
            headers=dict(options.headers),
            bodies=(options.body,) if options.body is not None else (),
            capture_headers=capture,
        )
        return EngineSender(spec, timeout_s=options.timeout_s, capture=capture)

    return await run_probe(paths, plan, make_sender, opened=lambda s: getattr(s, "opened", 0))


def router_unreachable(result: Result) -> bool:
    """True when routed requests were sent and none connected (connect errors only).

    Then the router could not be measured; a router that answers, even with 502s, is measurable.
    """
    paths = result.metrics.get("paths") or []
    router = next((p for p in paths if p.get("kind") == ROUTER), None)
    if router is None or not router.get("requests") or router.get("ok"):
        return False
    errors = router.get("errors") or {}
    return bool(errors) and set(errors) <= CONNECT_ERROR_CLASSES and sum(errors.values()) == router["requests"]


def _notes(evidence: RouteEvidence) -> list[ErrorNote]:
    notes: list[ErrorNote] = []
    if evidence.router.requests and evidence.router.ok == 0:
        classes = ", ".join(f"{k} x{v}" for k, v in evidence.router.errors.items())
        reached = not set(evidence.router.errors) <= CONNECT_ERROR_CLASSES
        what = "no routed request succeeded" if reached else "could not connect to the router"
        notes.append(ErrorNote("route.router", f"{what} ({classes})"))
    dist = evidence.distribution
    if evidence.router.ok and dist.header is None:
        notes.append(
            ErrorNote(
                "route.distribution",
                "no response named its backend (looked for " + ", ".join(UPSTREAM_HEADERS) + "); "
                "per-backend shares need --backend-header or e.g. nginx `add_header X-Upstream-Addr $upstream_addr`",
            )
        )
    elif dist.unattributed and dist.unknown_addresses:
        notes.append(
            ErrorNote(
                "route.distribution",
                f"{dist.unattributed} routed responses named backends that are not a --backend: "
                + ", ".join(dist.unknown_addresses),
                count=dist.unattributed,
            )
        )
    return notes


def build_metrics(evidence: RouteEvidence, run: ProbeRun, options: RouteOptions) -> RouteMetrics:
    """The ``metrics`` of a route result (layout in :mod:`infradoctor.route`), typed."""
    return RouteMetrics.from_dict(_metrics_dict(evidence, run, options))


def _metrics_dict(evidence: RouteEvidence, run: ProbeRun, options: RouteOptions) -> dict[str, Any]:
    att = evidence.attribution
    routed = [s.latency_ms for s in run.samples if s.kind == ROUTER and s.ok]
    direct = [s.latency_ms for s in run.samples if s.kind == DIRECT and s.ok]
    direct_requests = sum(b.direct.requests for b in evidence.backends)
    direct_errors = sum(b.direct.error_count for b in evidence.backends)
    headline: dict[str, float | int] = {}
    for name, value in (
        ("router_added_p50_ms", att.added_p50.value),
        ("router_added_p99_ms", att.added_p99.value),
        ("routed_p50_ms", att.routed_p50_ms),
        ("direct_p50_ms", att.direct_p50_ms),
        ("routed_p99_ms", att.routed_p99_ms),
        ("direct_p99_ms", att.direct_p99_ms),
        ("routed_error_rate", evidence.router.error_rate),
        ("direct_error_rate", direct_errors / direct_requests if direct_requests else None),
        ("requests", len(run.samples)),
    ):
        if value is not None:
            headline[name] = round(value, 4) if isinstance(value, float) else value
    return {
        "paths": [evidence.router.to_dict(), *(b.direct.to_dict() for b in evidence.backends)],
        "attribution": att.to_dict(),
        "backends": [b.to_dict() for b in evidence.backends],
        "distribution": evidence.distribution.to_dict(),
        "timeouts": evidence.timeout.to_dict() if evidence.timeout else None,
        "retries": evidence.retries.to_dict() if evidence.retries else None,
        "network": {
            "connect": [c.to_dict() for c in evidence.connect],
            "bandwidth": [b.to_dict() for b in evidence.bandwidth],
            "wakeup_delay_mean_ms": _round(evidence.wakeup_delay_mean_ms),
            "wakeup_delay_p99_ms": _round(evidence.wakeup_delay_p99_ms),
        },
        "plan": {
            "concurrency": options.concurrency,
            "direct_concurrency": direct_concurrency_for(options),
            "per_worker": options.per_worker,
            "duration_s": options.duration_s,
            "measured_s": round(evidence.duration_s, 3),
            "timeout_s": options.timeout_s,
            "method": options.method.upper(),
            "backend_header": options.backend_header,
            "weights": list(options.weights) if options.weights else None,
        },
        "headline": headline,
        "router_stats": evidence.router_stats.window.to_dict() if evidence.router_stats else None,
        "servers": [p.to_dict() for server in evidence.servers for p in server.points],
        "distributions": {
            "routed_latency_ms": [round(v, 4) for v in thin(routed, MAX_DISTRIBUTION_SAMPLES)],
            "direct_latency_ms": [round(v, 4) for v in thin(direct, MAX_DISTRIBUTION_SAMPLES)],
        },
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def parse_weights(text: str | None, count: int) -> tuple[float, ...] | None:
    """``--weights 3,1,1`` as floats (None when not given); raises UsageError on bad input."""
    if not text:
        return None
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise UsageError(f"--weights must be comma-separated numbers, got {text!r}") from None
    if len(values) != count:
        raise UsageError(f"--weights has {len(values)} values for {count} backends")
    return values


