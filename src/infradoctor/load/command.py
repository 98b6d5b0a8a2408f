"""The library entry of ``infradoctor load``: :func:`run` takes :class:`LoadOptions` and returns a Result.

No printing, no argv, no exit: the CLI (``infradoctor.cli.load``) turns argv into options and hands the result
to ``cli.base.finish``; ``profile --load-url`` uses :func:`measure` (the sweep, its metrics and findings without
the Result around them). Progress, per-point results and Ctrl-C reach the caller through the hooks in the options
(``on_progress``, ``on_point``, ``stop``, ``observers``); a KeyboardInterrupt during the sweep ends it with the
points finished so far, marked interrupted.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from infradoctor.errors import UsageError
from infradoctor.findings import Finding, rank_findings
from infradoctor.result import ErrorNote, Result, new_result, utc_now_iso

if TYPE_CHECKING:
    from infradoctor.load.driver import ProgressCallback
    from infradoctor.load.metrics import LoadMetrics, LoadSettings
    from infradoctor.load.point import PointResult, StopSignal
    from infradoctor.load.spec import RequestSpec
    from infradoctor.load.sweep import PointCallback, PointObserver, SweepResult

DEFAULT_DURATION_S = 5.0
"""Seconds per point unless a duration or a request count is given."""
CALIBRATE_CONCURRENCY = 32
"""Connections used by a calibration unless one concurrency level is given."""
CALIBRATE_DURATION_S = 3.0
"""Seconds of a calibration unless a duration is given."""
CAPTURED_HEADERS = ("server-timing", "x-envoy-upstream-service-time")
"""Response headers read for server-side stage times (unless ``capture_headers`` is off)."""

TARGET_UNREACHABLE = "load.target"
"""Error source: no request reached the target (nothing connected): the command exits 3."""
INTERRUPTED = "load.interrupted"
"""Error source: Ctrl-C ended the sweep early."""


@dataclass(frozen=True)
class LoadOptions:
    """What to load and how (the ``load`` command's options), plus the hooks a caller watches it through."""

    url: str | None = None
    """Target URL (http or https); not needed with ``calibrate``."""
    method: str | None = None
    """HTTP method (default GET, POST with a body or ``openai``)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra request headers."""
    bodies: Sequence[bytes] = ()
    """Request bodies, sent in rotation (``Content-Type: application/json`` unless a header says otherwise)."""
    openai: bool = False
    """OpenAI-compatible streaming completions: TTFT, inter-token latency, tokens/s."""
    sse: bool = False
    """Time the server-sent events of any endpoint."""
    model: str = "default"
    """Model name of the default ``openai`` body."""
    max_tokens: int = 64
    """``max_tokens`` of the default ``openai`` body."""
    capture_headers: bool = True
    """Read ``Server-Timing`` / ``x-envoy-upstream-service-time`` (off is fastest)."""
    insecure: bool = False
    """https: skip certificate verification."""
    concurrency: Sequence[int] | str | None = None
    """Closed loop: workers per point, or ``auto`` (the default when no ``rate`` is given)."""
    rate: Sequence[float] | str | None = None
    """Open loop: requests per second per point, or ``auto`` (an SLO search)."""
    slo: str | None = None
    """Objective, e.g. ``p99<500ms,errors<1%``: the target of ``rate='auto'`` (default ``p99<1s``); with any other
    sweep it is judged at each point (the highest level that met it) and by the rules (S001, S003 severity)."""
    arrivals: str = "constant"
    """Open-loop arrival process: ``constant`` or ``poisson``."""
    duration_s: float | None = None
    """Seconds per point (default 5 unless ``requests`` is given)."""
    requests: int | None = None
    """Requests per point."""
    timeout_s: float = 30.0
    """Per-request timeout."""
    max_concurrency: int = 256
    """Upper bound of ``concurrency='auto'``."""
    start_rate: float = 10.0
    """First rate of ``rate='auto'``."""
    max_connections: int = 1024
    """Open-loop connection pool limit."""
    seed: int = 0
    """Seed of Poisson arrivals."""
    processes: int = 1
    """Generator processes per point (histograms merged)."""
    calibrate: bool = False
    """Measure the generator's own ceiling against a built-in null server instead of loading ``url``."""
    on_progress: ProgressCallback | None = field(default=None, compare=False)
    """Called with a :class:`~infradoctor.load.point.Progress` a few times a second."""
    on_point: PointCallback | None = field(default=None, compare=False)
    """Called with each finished :class:`~infradoctor.load.point.PointResult`."""
    stop: StopSignal | None = field(default=None, compare=False)
    """Set it to end the current point and the sweep (Ctrl-C)."""
    observers: Sequence[PointObserver] = field(default=(), compare=False)
    """Watch each point from the side (:class:`~infradoctor.load.sweep.PointObserver`)."""

    def spec(self) -> RequestSpec:
        """The request to repeat; raises UsageError for a bad URL, header or body."""
        from infradoctor.load.spec import RequestSpec, Target, force_stream, openai_default_body

        if not self.url:
            raise UsageError("give a URL to load, or calibrate")
        target = Target.parse(self.url)
        bodies = list(self.bodies)
        if self.openai:
            if not bodies:
                bodies = [openai_default_body(target.path.split("?")[0], self.model, self.max_tokens)]
            bodies = [force_stream(b) for b in bodies]
        headers = dict(self.headers)
        if bodies and not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
        spec = RequestSpec(
            url=self.url,
            method=(self.method or ("POST" if bodies else "GET")).upper(),
            headers=headers,
            bodies=tuple(bodies),
            stream=self.openai or self.sse,
            openai=self.openai,
            capture_headers=CAPTURED_HEADERS if self.capture_headers else (),
            insecure=self.insecure,
        )
        spec.wire_requests()  # a header with a line break is a usage error now, not inside the run
        return spec

    def point_duration_s(self) -> float | None:
        """Seconds per point as run (the default applies when neither a duration nor a count is given)."""
        if self.duration_s is None and self.requests is None:
            return DEFAULT_DURATION_S
        return self.duration_s

    def validate(self) -> None:
        """Raise UsageError for options that cannot run."""
        if (self.duration_s is not None and not self.duration_s > 0) or (
            self.requests is not None and self.requests < 1
        ):
            raise UsageError("--duration and --requests must be positive")
        if not self.timeout_s > 0:
            raise UsageError("--timeout must be positive")
        if self.processes < 1:
            raise UsageError("--processes must be at least 1")
        if self.concurrency is not None and self.rate is not None:
            raise UsageError("give concurrency levels (closed loop) or rates (open loop), not both")
        if self.openai and self.sse:
            raise UsageError("--openai already times the stream; --sse is for other endpoints")


@dataclass(frozen=True)
class LoadRun:
    """A finished sweep: the points, their metrics and findings, and the problems met."""

    sweep: SweepResult
    """The points as measured (histograms whole)."""
    metrics: LoadMetrics
    """The result's metrics."""
    findings: tuple[Finding, ...]
    """The load rules' findings and the observers', ranked."""
    notes: tuple[ErrorNote, ...]
    """Problems met (target unreachable, interrupted)."""

    @property
    def reached(self) -> bool:
        """Some request reached the target (a connection was made)."""
        return any(p.ok or any(k not in _CONNECT_CLASSES for k in p.errors) for p in self.sweep.points)


_CONNECT_CLASSES = ("connect_refused", "connect_timeout", "connect_error")


def measure(options: LoadOptions) -> LoadRun:
    """Run the sweep the options describe and diagnose it (no Result around it; see :func:`run`)."""
    from infradoctor.load.analysis import build_metrics, diagnose
    from infradoctor.load.engine import run_sync
    from infradoctor.load.sweep import Slo, SweepResult, run_sweep_async

    options.validate()
    spec = options.spec()
    slo: Slo | None = None
    if options.slo:
        try:
            slo = Slo.parse(options.slo)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    levels: dict[str, Any] = {}
    if options.rate is not None:
        levels = {"rate": options.rate, "slo": slo, "start_rate": options.start_rate}
    else:
        levels = {"concurrency": options.concurrency or "auto", "max_concurrency": options.max_concurrency, "slo": slo}
    finished: list[PointResult] = []

    def on_point(point: PointResult) -> None:
        finished.append(point)
        if options.on_point is not None:
            options.on_point(point)

    duration = options.point_duration_s()
    settings = _settings(options, spec, duration, levels)
    try:
        sweep: SweepResult = run_sync(
            run_sweep_async(
                spec,
                stop=options.stop,
                on_point=on_point,
                observers=options.observers,
                on_progress=options.on_progress,
                duration_s=duration,
                requests=options.requests,
                timeout_s=options.timeout_s,
                arrivals=options.arrivals,
                max_connections=options.max_connections,
                seed=options.seed,
                processes=options.processes,
                **levels,
            )
        )
    except KeyboardInterrupt:
        sweep = SweepResult("closed" if options.rate is None else "open", points=finished,
                            stop_reason="interrupted")
    except BaseException:
        # the observers still get to stop (their sampling threads), over what was measured
        partial = SweepResult("closed" if options.rate is None else "open", points=finished, stop_reason="failed")
        for observer in options.observers:
            with contextlib.suppress(Exception):
                observer.findings(build_metrics(partial, settings))
        raise
    metrics = build_metrics(sweep, settings)
    findings = list(diagnose(metrics))
    notes: list[ErrorNote] = []
    for observer in options.observers:
        findings.extend(observer.findings(metrics))
    outcome = LoadRun(sweep, metrics, tuple(findings), ())
    if sweep.points and not outcome.reached:
        classes = sorted({k for p in sweep.points for k in p.errors})
        notes.append(ErrorNote(TARGET_UNREACHABLE, f"no request reached {spec.url}: {', '.join(classes)}"))
    if sweep.interrupted:
        notes.append(ErrorNote(INTERRUPTED, "stopped by Ctrl-C; the result holds the points so far"))
    return LoadRun(sweep, metrics, tuple(rank_findings(findings)), tuple(notes))


def run(options: LoadOptions) -> Result:
    """Load-test ``options.url`` (or calibrate the generator) and return the ``load`` result.

    Raises:
        UsageError: the options cannot run (bad URL, header, SLO, bounds).
    """
    if options.calibrate:
        return calibrate(options)
    started_at = utc_now_iso()
    t0 = time.perf_counter()
    outcome = measure(options)
    spec = options.spec()
    return new_result(
        "load",
        started_at=started_at,
        duration_s=time.perf_counter() - t0,
        target={"url": spec.url, "method": spec.method},
        metrics=outcome.metrics.to_dict(),
        findings=outcome.findings,
        errors=outcome.notes,
    )


def target_unreachable(result: Result) -> bool:
    """No request of this ``load`` result reached its target (the CLI exits 3)."""
    return any(note.source == TARGET_UNREACHABLE for note in result.errors)


def calibrate(options: LoadOptions) -> Result:
    """The generator's own ceiling against the built-in null server (a ``load`` result with ``calibration``)."""
    from infradoctor.load.analysis import build_metrics
    from infradoctor.load.engine import run_point_async, run_sync
    from infradoctor.load.metrics import Calibration, LoadHeadline, LoadSettings
    from infradoctor.load.nullserver import null_server
    from infradoctor.load.spec import RequestSpec
    from infradoctor.load.sweep import SweepResult

    options.validate()
    levels = options.concurrency
    concurrency = levels[0] if isinstance(levels, Sequence) and not isinstance(levels, str) and levels else (
        CALIBRATE_CONCURRENCY)
    duration = options.duration_s or CALIBRATE_DURATION_S
    started_at = utc_now_iso()
    t0 = time.perf_counter()
    with null_server() as url:
        spec = RequestSpec(url, capture_headers=("server-timing",) if options.capture_headers else ())
        point: PointResult = run_sync(
            run_point_async(
                spec,
                concurrency=int(concurrency),
                duration_s=duration,
                timeout_s=options.timeout_s,
                on_progress=options.on_progress,
                stop=options.stop,
                label=f"null c={concurrency}",
            )
        )
    if options.on_point is not None:
        options.on_point(point)
    sweep = SweepResult("closed", points=[point], stop_reason="calibration")
    parser, loop = _parser_name(), _loop_name()
    settings = LoadSettings(url="null-server", timeout_s=options.timeout_s, duration_s=duration, calibrate=True,
                            parser=parser, event_loop=loop, processes=options.processes)
    metrics = build_metrics(sweep, settings)
    cpu = point.client_cpu_fraction
    summary = metrics.points[0].latency_ms
    metrics = replace(
        metrics,
        knee=None,
        calibration=Calibration(
            concurrency=int(concurrency),
            throughput_rps=round(point.throughput_rps, 1),
            client_cpu_fraction=round(cpu, 3) if cpu == cpu else None,
            p99_ms=summary.p99,
            parser=parser,
            event_loop=loop,
            processes=options.processes,
        ),
        headline=LoadHeadline(calibration_rps=round(point.throughput_rps, 1),
                              client_cpu_fraction=round(cpu, 3) if cpu == cpu else None),
    )
    notes = [ErrorNote(INTERRUPTED, "stopped by Ctrl-C")] if point.interrupted else []
    return new_result(
        "load",
        started_at=started_at,
        duration_s=time.perf_counter() - t0,
        target={"url": "null-server", "calibrate": True},
        metrics=metrics.to_dict(),
        errors=notes,
    )


def _settings(
    options: LoadOptions, spec: RequestSpec, duration: float | None, levels: Mapping[str, Any]
) -> LoadSettings:
    from infradoctor.load.metrics import LoadSettings

    chosen = levels.get("rate", levels.get("concurrency"))
    return LoadSettings(
        url=spec.url,
        method=spec.method,
        timeout_s=options.timeout_s,
        duration_s=duration,
        requests=options.requests,
        arrivals=options.arrivals if options.rate is not None else None,
        levels=chosen if isinstance(chosen, str) else tuple(float(v) for v in chosen),
        stream=spec.stream,
        openai=spec.openai,
        bodies=len(spec.bodies),
        parser=_parser_name(),
        event_loop=_loop_name(),
        processes=options.processes,
    )


def _parser_name() -> str:
    from infradoctor.load import client

    return "httptools" if client.HAVE_HTTPTOOLS else "python"


def _loop_name() -> str:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return "asyncio"
    return "uvloop"
