"""The ``profile --load-url`` workflow (see the package docstring for the steps and the ``metrics`` layout)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit

import psutil

from infradoctor.errors import UsageError
from infradoctor.findings import Finding, Location, rank_findings, run_rules
from infradoctor.load.analysis import diagnose as diagnose_load
from infradoctor.load.command import LoadOptions, LoadRun, measure
from infradoctor.load.metrics import LoadHeadline, LoadMetrics
from infradoctor.load.point import PointResult, Progress
from infradoctor.load.spec import RequestSpec, Target
from infradoctor.procs import http_status, wait_until
from infradoctor.profile.evidence import ProfileEvidence
from infradoctor.profile.instrument import NO_ALLOC_SAMPLING_ENV
from infradoctor.profile.launcher import ProfiledProcess, ProfileOptions, start_profiled
from infradoctor.profile.metrics import (
    LoopSummary,
    ProfileHeadline,
    ProfileMetrics,
    ProfileService,
    ServerWorkers,
    ServiceCpu,
)
from infradoctor.profile.result import (
    EVIDENCE_FORMAT,
    EvidenceSink,
    ProfileRunOptions,
    build_result,
    evidence_bundle,
    further_interrupts_kill,
)
from infradoctor.profile.result import run as run_workload
from infradoctor.profile.rules import RuleOptions
from infradoctor.profile_load import DEFAULT_LEVELS, DEFAULT_POINT_DURATION_S, DEFAULT_READY_TIMEOUT_S
from infradoctor.result import ErrorNote, Result, utc_now_iso
from infradoctor.serve import autoattach
from infradoctor.serve.looplag import LoopLagEvidence
from infradoctor.serve.workers import WorkerLayout, interpreter_baseline, worker_layout

SETTLE_INTERVAL_S = 1.0
"""After the server answers, its process tree is read this often until it holds still."""

SETTLE_TOLERANCE = 0.05
"""... i.e. the same worker processes, each with RSS within 5% (or 10 MB) of the previous reading."""

SETTLE_TIMEOUT_S = 60.0
"""Upper bound on settling (a worker that keeps growing is loaded as it is)."""

NOT_READY = "service.ready"
"""Error source: the server never answered (or exited first); no load ran."""

LOAD_FAILED = "service.load"
"""Error source: the load ran and no request succeeded."""

PARALLEL_CPU_PERCENT = 130.0
"""A server whose processes used more than this (100 = one core) at the highest load serves requests in parallel."""

BUSY_MACHINE_PERCENT = 90.0
"""Mean CPU over all cores from which the machine, not the service, may set the pace."""


@dataclass(frozen=True)
class ServiceLoadOptions:
    """What load to drive at the server and how long to wait for it."""

    load_url: str
    """URL the load sweep targets."""
    ready_url: str | None = None
    """URL polled until it answers with any HTTP status (default: the load URL's origin, ``/``), so the probe
    itself does not warm the model up."""
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    """Bound on the wait for the server."""
    method: str | None = None
    """HTTP method (default GET, POST with a body)."""
    bodies: tuple[bytes, ...] = ()
    """Request bodies, sent in rotation."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra request headers."""
    concurrency: Sequence[int] | str = DEFAULT_LEVELS
    """Closed-loop levels, or ``auto``."""
    max_concurrency: int = 64
    """Upper bound for ``auto``."""
    point_duration_s: float | None = DEFAULT_POINT_DURATION_S
    """Seconds per level (None with ``point_requests``)."""
    point_requests: int | None = None
    """Requests per level instead of a duration."""
    timeout_s: float = 30.0
    """Per-request client timeout."""
    stall_threshold_s: float = 0.1
    """Event-loop lag that counts as a stall inside the server."""
    progress: Callable[[str], None] | None = field(default=None, compare=False)
    """Told what the run is doing, a line at a time as ``phase: detail`` (starting the server, waiting for it to
    answer, each load level, stopping it; the CLI's live progress). None: silent."""

    def load_options(self) -> LoadOptions:
        """The ``load`` command's options for this sweep."""
        return LoadOptions(
            url=self.load_url,
            method=self.method,
            headers=dict(self.headers),
            bodies=tuple(self.bodies),
            concurrency=self.concurrency if isinstance(self.concurrency, str) else list(self.concurrency),
            max_concurrency=self.max_concurrency,
            duration_s=self.point_duration_s if self.point_requests is None else None,
            requests=self.point_requests,
            timeout_s=self.timeout_s,
            on_progress=_load_progress(self.progress) if self.progress is not None else None,
            on_point=_point_done(self.progress) if self.progress is not None else None,
        )

    def spec(self) -> RequestSpec:
        """The load engine's request spec; raises UsageError for a bad URL or header."""
        return self.load_options().spec()

    def probe_url(self) -> str:
        """The readiness URL."""
        if self.ready_url:
            Target.parse(self.ready_url)
            return self.ready_url
        parts = urlsplit(self.load_url)
        return f"{parts.scheme}://{parts.netloc}/"


def _load_progress(say: Callable[[str], None]) -> Callable[[Progress], None]:
    def tick(progress: Progress) -> None:
        if progress.duration_s is not None:
            planned = f"{progress.completed} requests so far, {progress.elapsed_s:.1f}/{progress.duration_s:g} s"
        else:
            planned = f"{progress.completed}/{progress.requests} requests"
        say(f"load at {progress.label}: {planned}")

    return tick


def _point_done(say: Callable[[str], None]) -> Callable[[PointResult], None]:
    def done(point: PointResult) -> None:
        say(f"load at {point.label}: {point.completed} requests, {point.throughput_rps:.1f} ok/s")

    return done


def _processes(n: int) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"


def _quiet(text: str) -> None:
    """Progress nobody asked for."""


def _shown(argv: Sequence[str], limit: int = 80) -> str:
    text = " ".join(os.path.basename(argv[0]) if i == 0 else a for i, a in enumerate(argv)) if argv else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _child_env(base: Mapping[str, str] | None, serve_dir: str, stall_threshold_s: float) -> dict[str, str]:
    # the launcher's injected sitecustomize installs the loop watcher when it sees these
    env = dict(base or {})
    env[autoattach.DIR_ENV] = serve_dir
    env[autoattach.STALL_ENV] = repr(stall_threshold_s)
    # A leak-site sampler's first dispatch mode imports ~800 modules on the serving thread: a stall the load
    # sweep would time as the server's. Servers get the leak evidence from model outputs only.
    env[NO_ALLOC_SAMPLING_ENV] = "1"
    return env


def _stop_server(proc: ProfiledProcess) -> int | None:
    """Stop the server (SIGINT, SIGTERM, SIGKILL) and any of its processes it left running.

    A Ctrl-C meanwhile kills them at once, and the result is still written.
    """
    with further_interrupts_kill(proc):
        return proc.stop(reason="stopped")


def _same_layout(a: WorkerLayout, b: WorkerLayout) -> bool:
    if [w.pid for w in a.workers] != [w.pid for w in b.workers]:
        return False
    for old, new in zip(a.workers, b.workers, strict=True):
        if old.rss_mb is None or new.rss_mb is None:
            return False
        if abs(new.rss_mb - old.rss_mb) > max(10.0, SETTLE_TOLERANCE * old.rss_mb):
            return False
    return True


def settle(pid: int, *, timeout_s: float, alive: Callable[[], bool],
           on_read: Callable[[WorkerLayout], None] | None = None) -> WorkerLayout | None:
    """Wait (bounded) until the server's workers have all started and stopped growing; the last layout read.

    A multi-worker server answers as soon as its first worker is up; the others may still be loading the model.
    ``on_read`` sees each layout read.
    """
    deadline = time.monotonic() + timeout_s
    previous: WorkerLayout | None = None
    while alive():
        try:
            current = worker_layout(pid, gpu_memory_by_pid=None)
        except psutil.Error:
            return previous
        if on_read is not None:
            on_read(current)
        if previous is not None and _same_layout(previous, current):
            return current
        previous = current
        if time.monotonic() + SETTLE_INTERVAL_S > deadline:
            return current
        time.sleep(SETTLE_INTERVAL_S)
    return previous


def _relative(path: str, cwd: str | None) -> str:
    base = cwd or os.getcwd()
    try:
        rel = os.path.relpath(path, base)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def service_failed(result: Result) -> str | None:
    """Why the service could not be measured (it never answered, or no request succeeded), else None."""
    return next((e.message for e in result.errors if e.source in (NOT_READY, LOAD_FAILED)), None)


def _service_findings(loops: Sequence[LoopLagEvidence], layout: WorkerLayout | None, cwd: str | None,
                      ) -> list[Finding]:
    findings: list[Finding] = []
    blocked = [f for e in loops for f in run_rules(e)]
    if blocked:
        worst = max(blocked, key=lambda f: float(f.evidence.get("blocked_s", 0.0)))
        loc = worst.location
        if loc is not None:
            worst = replace(worst, location=Location(_relative(loc.file, cwd), loc.line, loc.column, loc.function))
        findings.append(worst)
    if layout is not None:
        findings.extend(run_rules(layout))
    return findings


def _merge_headline(load: LoadHeadline | None, profile: ProfileHeadline, loops: Sequence[LoopLagEvidence],
                    layout: WorkerLayout | None) -> ProfileHeadline:
    """The load's headline, then the service's numbers, then the profile's (the first two win on a shared name)."""
    lags = [e.lag_p99_ms for e in loops if e.lag_p99_ms is not None]
    service: dict[str, Any] = {
        "loop_blocked_s": round(max(e.blocked_s for e in loops), 4) if loops else None,
        "loop_lag_p99_ms": round(max(lags), 3) if lags else None,
        "workers": len(layout.workers) if layout is not None else None,
    }
    if load is not None:
        service = {f.name: getattr(load, f.name) for f in fields(LoadHeadline)} | service
    return replace(profile, **{k: v for k, v in service.items() if v is not None})


def _load_findings(load: LoadMetrics, cpu: ServiceCpu | None, loop_blocked: bool) -> tuple[list[Finding], str | None]:
    """The load rules' findings, and why S001 was not judged (None when it was).

    A server whose event loop was held by its own code (S002) serves one request at a time whatever the machine
    does: S001 stands. Otherwise flat throughput says nothing when the server used more than a core, or when the
    machine's cores were all busy.
    """
    findings = diagnose_load(load)
    why = None if loop_blocked else _not_serialized(cpu)
    if why is None or not any(f.code == "S001" for f in findings):
        return findings, None
    return [f for f in findings if f.code != "S001"], why


def merge_results(
    profile_result: Result,
    load_metrics: LoadMetrics | Mapping[str, Any] | None,
    loops: Sequence[LoopLagEvidence],
    layout: WorkerLayout | None,
    service: Mapping[str, Any],
    notes: Sequence[ErrorNote] = (),
    *,
    duration_s: float,
    cwd: str | None = None,
) -> Result:
    """One ``profile`` result from the profiler's result, the load metrics and the service evidence.

    ``service`` holds ``load_url``, ``ready_url``, ``ready_s``, ``stop_exit_status`` and ``cpu_at_peak_load`` (as
    :class:`~infradoctor.profile.metrics.ProfileService` writes them).

    Raises:
        MetricsError: the profile's or the load's metrics do not have their documented shape.
    """
    profile = ProfileMetrics.from_dict(profile_result.metrics)
    load = LoadMetrics.from_dict(load_metrics) if isinstance(load_metrics, Mapping) and load_metrics else (
        load_metrics if isinstance(load_metrics, LoadMetrics) else None)
    info = ProfileService.from_dict(service)
    findings = list(profile_result.findings)
    service_findings = _service_findings(loops, layout, cwd)
    not_judged = None
    if load is not None:
        blocked = any(f.code == "S002" for f in service_findings)
        load_findings, not_judged = _load_findings(load, info.cpu_at_peak_load, blocked)
        findings.extend(load_findings)
    findings.extend(service_findings)
    metrics = replace(
        profile,
        headline=_merge_headline(load.headline if load else None, profile.headline, loops, layout),
        distributions=replace(profile.distributions,
                              latency_ms=load.distributions.get("latency_ms") if load else None),
        load=load,
        service=replace(info, s001_not_judged=not_judged, loop=tuple(_loop_summary(e) for e in loops),
                        workers=ServerWorkers.from_dict(layout.to_dict()) if layout is not None else None),
    )
    return replace(
        profile_result,
        duration_s=round(duration_s, 3),
        target={**profile_result.target, "load_url": info.load_url},
        metrics=metrics.to_dict(),
        findings=tuple(rank_findings(findings)),
        errors=(*profile_result.errors, *notes),
    )


def _loop_summary(evidence: LoopLagEvidence) -> LoopSummary:
    return LoopSummary.from_dict(evidence.summary_dict())


def _not_serialized(cpu: ServiceCpu | None) -> str | None:
    """Why flat throughput does not show one-request-at-a-time serving, from the CPU at the highest load, or None.

    A server whose processes used more than a core serves in parallel; a machine whose cores were all busy (the
    load generator shares them) sets the pace itself, whatever the service does.
    """
    if cpu is None:
        return None
    server, machine = cpu.server_cpu_percent, cpu.machine_cpu_percent
    if server is not None and server >= PARALLEL_CPU_PERCENT:
        return f"the server's processes used {server:.0f}% CPU (more than one core) at the highest load"
    if machine is not None and machine >= BUSY_MACHINE_PERCENT:
        return (f"the machine's {cpu.cores or '?'} cores were {machine:.0f}% busy at the highest load: the "
                "machine, not the service, set the pace")
    return None


def cpu_at(evidence: ProfileEvidence, start: float, end: float) -> dict[str, Any] | None:
    """The server tree's and the machine's mean CPU between two monotonic times (None without samples)."""
    samples = [s for s in evidence.system if start <= s.t <= end]
    if not samples:
        return None
    server = [s.process_cpu_percent for s in samples if s.process_cpu_percent is not None]
    machine = [sum(s.cpu_percent) / len(s.cpu_percent) for s in samples if s.cpu_percent]
    return {
        "server_cpu_percent": round(sum(server) / len(server), 1) if server else None,
        "machine_cpu_percent": round(sum(machine) / len(machine), 1) if machine else None,
        "cores": max((len(s.cpu_percent) for s in samples), default=0),
        "samples": len(samples),
    }


def run(options: ProfileRunOptions, service: ServiceLoadOptions | None = None) -> Result:
    """The ``profile`` command as a library: the workload alone, or (with ``service``) a server under load.

    Without ``service`` this is :func:`infradoctor.profile.run`. With it, ``options.argv`` starts the server, the
    sweep decides how long it runs (``max_steps`` and ``duration_s`` do not apply) and ``service.progress`` hears
    what the run is doing.

    Raises:
        UsageError: the options cannot run (a bad URL or header, a step or time limit with a service).
        TargetError: the server command cannot be started.
    """
    if service is None:
        return run_workload(options)
    if options.max_steps is not None or options.duration_s is not None:
        raise UsageError("a step or time limit does not apply to a server under load (the sweep decides)")
    options.validate()
    return profile_service(list(options.argv), service, options.launch_options(), options.rule_options,
                           on_evidence=options.on_evidence)


@dataclass
class _ServerRun:
    """What one server run gathered, filled in as it goes (a Ctrl-C keeps what was measured)."""

    notes: list[ErrorNote] = field(default_factory=list)
    load: LoadRun | None = None
    layout: WorkerLayout | None = None
    ready_unix: float | None = None
    ready_s: float | None = None
    peak_window: tuple[float, float] | None = None
    stop_status: int | None = None


def profile_service(
    argv: Sequence[str],
    options: ServiceLoadOptions,
    profile_options: ProfileOptions | None = None,
    rule_options: RuleOptions | None = None,
    *,
    on_evidence: EvidenceSink | None = None,
) -> Result:
    """Run the server ``argv`` under the profiler, load it, stop it and return the merged result.

    Raises:
        UsageError: the load or readiness URL or a header is not usable.
        TargetError: the server command cannot be started.
    """
    spec = options.spec()
    probe = options.probe_url()
    if options.point_duration_s is None and options.point_requests is None:
        raise UsageError("give a duration or a number of requests per load level")
    say = options.progress or _quiet
    started_at = utc_now_iso()
    t0 = time.perf_counter()
    serve_dir = tempfile.mkdtemp(prefix="infradoctor-serve-")
    base = profile_options or ProfileOptions()
    popts = replace(base, env=_child_env(base.env, serve_dir, options.stall_threshold_s), max_steps=None,
                    duration_s=None)
    say(f"starting the server: {_shown(argv)}")
    try:
        proc = start_profiled(argv, popts)
    except BaseException:
        shutil.rmtree(serve_dir, ignore_errors=True)
        raise
    run = _ServerRun()
    try:
        _drive(proc, options, probe, run, t0, say)
        evidence = proc.collect()
        loops = [e.since(run.ready_unix) if run.ready_unix is not None else e
                 for e in autoattach.read_loop_evidence(serve_dir)]
    finally:
        proc.close()
        shutil.rmtree(serve_dir, ignore_errors=True)
    bundle = _service_bundle(evidence, started_at, spec.url, probe, run, loops, time.perf_counter() - t0)
    if on_evidence is not None:
        on_evidence(bundle)
    return judge_service_bundle(bundle, evidence, started_at, rule_options)


def _drive(proc: ProfiledProcess, options: ServiceLoadOptions, probe: str, run: _ServerRun, t0: float,
           say: Callable[[str], None]) -> None:
    """Wait for the server, load it, read its workers; then stop it, whatever happened (Ctrl-C included)."""
    try:
        try:
            if _wait_ready(proc, probe, options.ready_timeout_s, say):
                _load(proc, options, run, t0, say)
            else:
                why = "exited" if proc.poll() is not None else f"did not answer within {options.ready_timeout_s:g} s"
                run.notes.append(ErrorNote(NOT_READY, f"the server {why} ({probe}); no load was driven"))
        except KeyboardInterrupt:
            run.notes.append(ErrorNote("service.interrupted", "stopped by Ctrl-C; the result holds what was measured"))
    finally:
        say(f"stopping the server: pid {proc.pid}")
        run.stop_status = _stop_server(proc)


def _wait_ready(proc: ProfiledProcess, probe: str, timeout_s: float, say: Callable[[str], None]) -> bool:
    """Poll ``probe`` until it answers (True), the server exits or the time is up (False)."""
    start = time.monotonic()

    def answers() -> bool:
        say(f"waiting for the server to answer {probe}: {time.monotonic() - start:.0f} s")
        return http_status(probe, timeout=1.0) is not None

    return wait_until(answers, timeout=timeout_s, interval=0.2, alive=lambda: proc.poll() is None)


def _load(proc: ProfiledProcess, options: ServiceLoadOptions, run: _ServerRun, t0: float,
          say: Callable[[str], None]) -> None:
    """Let the workers settle, drive the sweep, read the worker layout while the server is still up."""
    start = time.monotonic()
    settle(proc.pid, timeout_s=min(SETTLE_TIMEOUT_S, options.ready_timeout_s), alive=lambda: proc.poll() is None,
           on_read=lambda layout: say(f"waiting for its worker processes to settle: {_processes(len(layout.workers))}, "
                                      f"{time.monotonic() - start:.0f} s"))
    run.ready_unix = time.time()
    run.ready_s = round(time.perf_counter() - t0, 3)
    run.load = measure(options.load_options())
    sweep_end = time.monotonic()
    last = run.load.sweep.points[-1] if run.load.sweep.points else None
    if last is not None:
        run.peak_window = (sweep_end - float(last.elapsed_s), sweep_end)
    try:
        run.layout = worker_layout(proc.pid)
        if len(run.layout.workers) >= 2:
            run.layout = interpreter_baseline(run.layout)  # what each worker holds without a model (S004)
    except psutil.Error as exc:
        run.notes.append(ErrorNote("service.workers", f"cannot read the server's processes: {exc}"))


def _service_bundle(evidence: ProfileEvidence, started_at: str, load_url: str, probe: str, run: _ServerRun,
                    loops: Sequence[LoopLagEvidence], duration_s: float) -> dict[str, Any]:
    """The server run's evidence as JSON (``--save-evidence``), judged by :func:`judge_service_bundle`."""
    notes = list(run.notes)
    load = run.load
    if load is not None:
        notes.extend(n for n in load.notes if n.source != "load.target")  # (LOAD_FAILED says it for the service)
        if not any(p.ok for p in load.sweep.points):
            notes.append(ErrorNote(LOAD_FAILED, f"no request to {load_url} succeeded"))
    service = {"load_url": load_url, "ready_url": probe, "ready_s": run.ready_s, "stop_exit_status": run.stop_status,
               "cpu_at_peak_load": cpu_at(evidence, *run.peak_window) if run.peak_window is not None else None}
    return {**evidence_bundle(evidence, started_at), "service": service,
            "load": load.metrics.to_dict() if load is not None else None,
            "loops": [e.to_dict() for e in loops], "layout": run.layout.to_dict() if run.layout is not None else None,
            "notes": [n.to_dict() for n in notes],
            "requests": sum(p.sent for p in load.sweep.points) if load is not None else None,
            "duration_s": round(duration_s, 3)}


def judge_service_bundle(bundle: Mapping[str, Any], evidence: ProfileEvidence, started_at: str,
                         rule_options: RuleOptions | None = None) -> Result:
    """The merged result of a server run from its evidence (live, or a saved ``--save-evidence`` bundle)."""
    requests = bundle.get("requests")
    serving_rules = replace(rule_options or RuleOptions(), serving=True,
                            requests=int(requests) if isinstance(requests, int) else None)
    profile_result = build_result(evidence, started_at=started_at, rule_options=serving_rules)
    loops = [LoopLagEvidence.from_dict(e) for e in bundle.get("loops") or () if isinstance(e, Mapping)]
    layout_data = bundle.get("layout")
    layout = WorkerLayout.from_dict(layout_data) if isinstance(layout_data, Mapping) else None
    notes = [ErrorNote.from_dict(n) for n in bundle.get("notes") or () if isinstance(n, Mapping)]
    load = bundle.get("load")
    return merge_results(profile_result, load if isinstance(load, Mapping) else None, loops, layout,
                         dict(bundle.get("service") or {}), notes,
                         duration_s=float(bundle.get("duration_s") or evidence.duration_s),
                         cwd=(rule_options or RuleOptions()).cwd)


def judge_bundle(bundle: Mapping[str, Any], rule_options: RuleOptions | None = None) -> Result:
    """The result of a saved run, judged by today's rules (a ``profile --load-url`` bundle included).

    Raises:
        ValueError: not an evidence bundle (or its metrics do not have their documented shape).
    """
    if not isinstance(bundle, Mapping) or bundle.get("format") != EVIDENCE_FORMAT:
        raise ValueError(f"not a profile evidence file (format {EVIDENCE_FORMAT!r})")
    evidence = ProfileEvidence.from_dict(bundle.get("profile") or {})
    started_at = str(bundle.get("started_at") or utc_now_iso())
    if "service" in bundle:
        return judge_service_bundle(bundle, evidence, started_at, rule_options)
    return build_result(evidence, started_at=started_at, rule_options=rule_options)
