"""The ``profile --load-url`` workflow (see the package docstring for the steps and the ``metrics`` layout)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import psutil

from infradoctor.errors import UsageError
from infradoctor.findings import Finding, Location, rank_findings, run_rules
from infradoctor.load.analysis import diagnose as diagnose_load
from infradoctor.load.command import LoadOptions, LoadRun, measure
from infradoctor.load.spec import RequestSpec, Target
from infradoctor.procs import http_status, wait_until
from infradoctor.profile.evidence import ProfileEvidence
from infradoctor.profile.instrument import NO_ALLOC_SAMPLING_ENV
from infradoctor.profile.launcher import ProfiledProcess, ProfileOptions, start_profiled
from infradoctor.profile.result import (
    EVIDENCE_FORMAT,
    EvidenceSink,
    build_result,
    evidence_bundle,
    further_interrupts_kill,
)
from infradoctor.profile.rules import RuleOptions
from infradoctor.profile_load import DEFAULT_LEVELS, DEFAULT_POINT_DURATION_S, DEFAULT_READY_TIMEOUT_S
from infradoctor.result import ErrorNote, Result, utc_now_iso
from infradoctor.serve import autoattach
from infradoctor.serve.looplag import LoopLagEvidence
from infradoctor.serve.workers import WorkerLayout, worker_layout

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


def settle(pid: int, *, timeout_s: float, alive: Callable[[], bool]) -> WorkerLayout | None:
    """Wait (bounded) until the server's workers have all started and stopped growing; the last layout read.

    A multi-worker server answers as soon as its first worker is up; the others may still be loading the model.
    """
    deadline = time.monotonic() + timeout_s
    previous: WorkerLayout | None = None
    while alive():
        try:
            current = worker_layout(pid, gpu_memory_by_pid=None)
        except psutil.Error:
            return previous
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


def _merge_headline(load: Mapping[str, Any], profile: Mapping[str, Any], loops: Sequence[LoopLagEvidence],
                    layout: WorkerLayout | None) -> dict[str, Any]:
    headline: dict[str, Any] = dict(load)
    if loops:
        headline["loop_blocked_s"] = round(max(e.blocked_s for e in loops), 4)
        lags = [e.lag_p99_ms for e in loops if e.lag_p99_ms is not None]
        if lags:
            headline["loop_lag_p99_ms"] = round(max(lags), 3)
    if layout is not None:
        headline["workers"] = len(layout.workers)
    for key, value in profile.items():
        headline.setdefault(key, value)
    return headline


def merge_results(
    profile_result: Result,
    load_metrics: Mapping[str, Any] | None,
    loops: Sequence[LoopLagEvidence],
    layout: WorkerLayout | None,
    service: Mapping[str, Any],
    notes: Sequence[ErrorNote] = (),
    *,
    duration_s: float,
    cwd: str | None = None,
) -> Result:
    """One ``profile`` result from the profiler's result, the load metrics and the service evidence."""
    metrics = dict(profile_result.metrics)
    findings = list(profile_result.findings)
    load = dict(load_metrics or {})
    service = dict(service)
    if load:
        load_findings = diagnose_load(load)
        why = _not_serialized(service.get("cpu_at_peak_load"))
        if why is not None and any(f.code == "S001" for f in load_findings):
            load_findings = [f for f in load_findings if f.code != "S001"]
            service["s001_not_judged"] = why
        findings.extend(load_findings)
    findings.extend(_service_findings(loops, layout, cwd))
    metrics["load"] = load or None
    metrics["service"] = {
        **service,
        "loop": [e.summary_dict() for e in loops],
        "workers": layout.to_dict() if layout is not None else None,
    }
    metrics["headline"] = _merge_headline(load.get("headline") or {}, profile_result.metrics.get("headline") or {},
                                          loops, layout)
    distributions = dict(profile_result.metrics.get("distributions") or {})
    distributions.update(load.get("distributions") or {})
    metrics["distributions"] = distributions
    return replace(
        profile_result,
        duration_s=round(duration_s, 3),
        target={**profile_result.target, "load_url": service.get("load_url")},
        metrics=metrics,
        findings=tuple(rank_findings(findings)),
        errors=(*profile_result.errors, *notes),
    )


def _not_serialized(cpu: Any) -> str | None:
    """Why flat throughput does not show one-request-at-a-time serving, from the CPU at the highest load, or None.

    A server whose processes used more than a core serves in parallel; a machine whose cores were all busy (the
    load generator shares them) sets the pace itself, whatever the service does.
    """
    if not isinstance(cpu, Mapping):
        return None
    server = cpu.get("server_cpu_percent")
    machine = cpu.get("machine_cpu_percent")
    if isinstance(server, (int, float)) and server >= PARALLEL_CPU_PERCENT:
        return f"the server's processes used {server:.0f}% CPU (more than one core) at the highest load"
    if isinstance(machine, (int, float)) and machine >= BUSY_MACHINE_PERCENT:
        return (f"the machine's {cpu.get('cores') or '?'} cores were {machine:.0f}% busy at the highest load: the "
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
    started_at = utc_now_iso()
    t0 = time.perf_counter()
    serve_dir = tempfile.mkdtemp(prefix="infradoctor-serve-")
    base = profile_options or ProfileOptions()
    popts = replace(base, env=_child_env(base.env, serve_dir, options.stall_threshold_s), max_steps=None,
                    duration_s=None)
    notes: list[ErrorNote] = []
    load: LoadRun | None = None
    layout: WorkerLayout | None = None
    ready_unix: float | None = None
    ready_s: float | None = None
    peak_window: tuple[float, float] | None = None
    try:
        proc = start_profiled(argv, popts)
    except BaseException:
        shutil.rmtree(serve_dir, ignore_errors=True)
        raise
    try:
        try:
            ready = wait_until(lambda: http_status(probe, timeout=1.0) is not None, timeout=options.ready_timeout_s,
                               interval=0.2, alive=lambda: proc.poll() is None)
            if not ready:
                why = "exited" if proc.poll() is not None else f"did not answer within {options.ready_timeout_s:g} s"
                notes.append(ErrorNote(NOT_READY, f"the server {why} ({probe}); no load was driven"))
            else:
                settle(proc.pid, timeout_s=min(SETTLE_TIMEOUT_S, options.ready_timeout_s),
                       alive=lambda: proc.poll() is None)
                ready_unix = time.time()
                ready_s = round(time.perf_counter() - t0, 3)
                load = measure(options.load_options())
                sweep_end = time.monotonic()
                last = load.sweep.points[-1] if load.sweep.points else None
                if last is not None:
                    peak_window = (sweep_end - float(last.elapsed_s), sweep_end)
                try:
                    layout = worker_layout(proc.pid)
                except psutil.Error as exc:
                    notes.append(ErrorNote("service.workers", f"cannot read the server's processes: {exc}"))
        except KeyboardInterrupt:
            notes.append(ErrorNote("service.interrupted", "stopped by Ctrl-C; the result holds what was measured"))
        finally:
            stop_status = _stop_server(proc)
        evidence = proc.collect()
        loops = [e.since(ready_unix) if ready_unix is not None else e
                 for e in autoattach.read_loop_evidence(serve_dir)]
    finally:
        proc.close()
        shutil.rmtree(serve_dir, ignore_errors=True)
    requests = sum(p.sent for p in load.sweep.points) if load is not None else None
    load_metrics = load.metrics.to_dict() if load is not None else None
    if load is not None:
        notes.extend(n for n in load.notes if n.source != "load.target")  # (LOAD_FAILED says it for the service)
        if not any(p.ok for p in load.sweep.points):
            notes.append(ErrorNote(LOAD_FAILED, f"no request to {spec.url} succeeded"))
    service = {"load_url": spec.url, "ready_url": probe, "ready_s": ready_s, "stop_exit_status": stop_status,
               "cpu_at_peak_load": cpu_at(evidence, *peak_window) if peak_window is not None else None}
    bundle = {**evidence_bundle(evidence, started_at), "service": service, "load": load_metrics,
              "loops": [e.to_dict() for e in loops], "layout": layout.to_dict() if layout is not None else None,
              "notes": [n.to_dict() for n in notes], "requests": requests,
              "duration_s": round(time.perf_counter() - t0, 3)}
    if on_evidence is not None:
        on_evidence(bundle)
    return judge_service_bundle(bundle, evidence, started_at, rule_options)


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
        ValueError: not an evidence bundle.
    """
    if not isinstance(bundle, Mapping) or bundle.get("format") != EVIDENCE_FORMAT:
        raise ValueError(f"not a profile evidence file (format {EVIDENCE_FORMAT!r})")
    evidence = ProfileEvidence.from_dict(bundle.get("profile") or {})
    started_at = str(bundle.get("started_at") or utc_now_iso())
    if "service" in bundle:
        return judge_service_bundle(bundle, evidence, started_at, rule_options)
    return build_result(evidence, started_at=started_at, rule_options=rule_options)
