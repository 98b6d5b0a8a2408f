"""From evidence to derived numbers (steady-state phases, throughput, memory trend) and to ``metrics``.

:func:`analyze` is pure: the same :class:`ProfileEvidence` (live or recorded) gives the same
:class:`ProfileAnalysis`, which the rules read and :func:`build_metrics` lays out for the result as typed
:class:`~infradoctor.profile.metrics.ProfileMetrics` (one small builder per part).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from infradoctor.profile.evidence import CallSite, ModuleUse, ProfileEvidence, StepRecord
from infradoctor.profile.metrics import (
    PHASE_NAMES,
    AllocSite,
    DataLoaderUse,
    HostSync,
    ModelCallSite,
    ModelLoad,
    ModelModule,
    ModuleConstruction,
    OtherModule,
    ProfileDataloader,
    ProfileDistributions,
    ProfileH2d,
    ProfileHeadline,
    ProfileMemory,
    ProfileMemoryTimeline,
    ProfileMemoryTrend,
    ProfileMetrics,
    ProfileModel,
    ProfilePrecision,
    ProfileSteps,
    ProfileSystem,
    ProfileSystemTimeline,
    ProfileThroughput,
    ProfileWorkload,
    StepPhases,
    StepTimes,
    WorkloadException,
)
from infradoctor.stats import evenly_spaced, percentile

PHASES = PHASE_NAMES
"""Step phases, in the order the breakdown bar shows them."""
MAX_WARMUP_STEPS = 5
"""At most this many first steps count as warm-up."""
MAX_DISTRIBUTION = 5000
"""Raw samples kept per distribution (deterministically subsampled)."""
MAX_TIMELINE = 300
"""Points kept in the memory and system timelines."""


@dataclass(frozen=True)
class MemoryTrend:
    """Least-squares line through the memory readings of steady steps."""

    source: str
    """``heap`` (glibc heap incl. CPU tensors), ``cuda`` (allocator) or ``rss``."""
    readings: int
    """Readings used."""
    slope_bytes_per_step: float
    """Growth per step."""
    r2: float
    """Fit quality (1 = perfectly steady growth)."""
    growth_bytes: float
    """Fitted growth over the steady steps."""
    start_bytes: float
    """First reading."""
    end_bytes: float
    """Last reading."""


@dataclass(frozen=True)
class ProfileAnalysis:
    """Derived numbers the rules and the metrics use."""

    evidence: ProfileEvidence
    """What was measured."""
    steps: tuple[StepRecord, ...]
    """Complete steps (the last, partial one left out)."""
    warmup: tuple[StepRecord, ...]
    """First steps counted as warm-up."""
    steady: tuple[StepRecord, ...]
    """Steady-state steps (the rest)."""
    phase_s: dict[str, float]
    """Seconds per phase over steady steps."""
    steady_time_s: float
    """Sum of steady step durations."""
    steps_time_s: float
    """Sum of all complete step durations."""
    step_ms: tuple[float, ...]
    """Steady step durations in ms."""
    samples_per_s: float | None
    """Steady samples per second."""
    steps_per_s: float | None
    """Steady steps per second."""
    memory: MemoryTrend | None
    """Memory trend, when enough readings."""
    cores: int
    """Cores seen by the system sampler (0 when unknown)."""
    gpu_util_mean: float | None
    """Mean NVML utilisation during the steps (None without NVML samples)."""
    main: ModuleUse | None = None
    """The model: the largest top-level module."""
    sync_span_s: float = 0.0
    """Time of loops around host reads, summed over sites."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Room for derived values that a rule wants to share."""

    def fraction(self, phase: str) -> float:
        """Share of steady step time in a phase."""
        return self.phase_s.get(phase, 0.0) / self.steady_time_s if self.steady_time_s > 0 else 0.0

    @property
    def run_time_s(self) -> float:
        """Denominator for 'share of run time': the steps' time, or the process's wall time without steps."""
        return self.steps_time_s if self.steps_time_s > 0 else max(self.evidence.duration_s, 1e-9)


def warmup_count(n: int) -> int:
    """First steps treated as warm-up: a tenth of them, at least 1 with 3+ steps, at most MAX_WARMUP_STEPS."""
    if n < 3:
        return 0
    return max(1, min(MAX_WARMUP_STEPS, n // 10))


def _phase_seconds(step: StepRecord) -> dict[str, float]:
    return {
        "data_wait": step.data_wait_s,
        "h2d": step.h2d_s,
        "forward": step.forward_s,
        "backward": step.backward_s,
        "optimizer": step.optimizer_s,
        "sync": step.sync_s,
        "load": step.load_s,
        "other": step.other_s,
    }


MEMORY_READINGS = {"cuda": "cuda_alloc_bytes", "heap": "heap_bytes", "rss": "rss_bytes"}
"""A memory trend's source -> the step record's field that holds its readings."""


def memory_trend(steps: Sequence[StepRecord], cuda: bool) -> MemoryTrend | None:
    """Fit a line through steady-step memory readings (CUDA allocator on GPU, else glibc heap, else RSS)."""
    for source in (("cuda",) if cuda else ()) + ("heap", "rss"):
        attr = MEMORY_READINGS[source]
        points = [(float(s.index), float(v)) for s in steps if (v := getattr(s, attr)) is not None]
        if len(points) < 5:
            continue
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        if sxx == 0:
            continue
        sxy = sum((x - mx) * (y - my) for x, y in points)
        syy = sum((y - my) ** 2 for y in ys)
        slope = sxy / sxx
        r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
        return MemoryTrend(source, len(points), slope, r2, slope * (xs[-1] - xs[0]), ys[0], ys[-1])
    return None


def analyze(evidence: ProfileEvidence) -> ProfileAnalysis:
    """Derive the steady-state picture of a run."""
    steps = tuple(s for s in evidence.steps if not s.partial)
    warm = warmup_count(len(steps))
    # steps with allocation sampling run slower: their memory readings count, their timing does not
    warmup = tuple(s for s in steps[:warm] if not s.alloc_sampled)
    steady = tuple(s for s in steps[warm:] if not s.alloc_sampled)
    phase_s = dict.fromkeys(PHASES, 0.0)
    for step in steady:
        for name, value in _phase_seconds(step).items():
            phase_s[name] += value
    steady_time = sum((s.duration_s for s in steady), 0.0)
    samples = sum(s.samples for s in steady)
    cores = max((len(s.cpu_percent) for s in evidence.system), default=evidence.cpu_count)
    gpu_util: float | None = None
    if steady:
        window = [s for s in evidence.system if steady[0].start <= s.t <= steady[-1].end + 1.0 and s.gpu_util_percent]
        if window:
            gpu_util = statistics.fmean(statistics.fmean(s.gpu_util_percent) for s in window)
    return ProfileAnalysis(
        evidence=evidence,
        steps=steps,
        warmup=warmup,
        steady=steady,
        phase_s=phase_s,
        steady_time_s=steady_time,
        steps_time_s=sum((s.duration_s for s in steps if not s.alloc_sampled), 0.0),
        step_ms=tuple(1000.0 * s.duration_s for s in steady),
        samples_per_s=samples / steady_time if steady_time > 0 and samples else None,
        steps_per_s=len(steady) / steady_time if steady_time > 0 else None,
        memory=memory_trend(steps[warm:], evidence.cuda),
        cores=cores,
        gpu_util_mean=gpu_util,
        main=evidence.module(evidence.main_module),
        sync_span_s=sum(s.span_s for s in evidence.syncs),
    )


def shell_exit_code(status: int | None) -> int | None:
    """A process status as a shell shows it: 128+N when killed by signal N."""
    if status is None:
        return None
    return 128 + (-status) if status < 0 else status


def subsample(values: Sequence[float], limit: int = MAX_DISTRIBUTION) -> list[float]:
    """At most ``limit`` values, evenly strided (deterministic)."""
    return [round(v, 4) for v in evenly_spaced(values, limit)]


MAX_CALL_SITES = 5
"""Call sites listed per model in the metrics (most calls first)."""
MAX_LISTED = 10
"""Modules, host-read sites and allocation sites listed in the metrics."""

T = TypeVar("T")


def _thin(items: Sequence[T], limit: int = MAX_TIMELINE) -> list[T]:
    """At most ``limit`` items, evenly strided, in order."""
    if len(items) <= limit:
        return list(items)
    stride = len(items) / limit
    return [items[int(i * stride)] for i in range(limit)]


def _site(file: object, line: object) -> str:
    return f"{file}:{line}"


def _main_site(module: ModuleUse) -> str | None:
    site = max(module.call_sites, key=lambda c: c.calls, default=None)
    if site is not None:
        return _site(site.file, site.line)
    return _site(module.sites[0]["file"], module.sites[0]["line"]) if module.sites else None


def _mb(value: float | None) -> float | None:
    return round(value / 1e6, 2) if value is not None else None


def _ms(value: float | None) -> float | None:
    return round(1000.0 * value, 3) if value is not None else None


def _round(value: float | None, digits: int = 3) -> float | None:
    return round(value, digits) if value is not None else None


def build_metrics(analysis: ProfileAnalysis) -> ProfileMetrics:
    """The ``metrics`` of a profile result (layout in :mod:`infradoctor.profile.metrics`)."""
    ev = analysis.evidence
    steps = _steps(analysis)
    throughput = _throughput(analysis)
    memory = _memory(analysis)
    system = _system(analysis)
    return ProfileMetrics(
        workload=_workload(ev),
        headline=_headline(steps, throughput, memory, system, cuda=ev.cuda),
        steps=steps,
        throughput=throughput,
        memory=memory,
        model=_model(ev),
        syncs=_syncs(analysis),
        dataloader=_dataloader(ev),
        h2d=ProfileH2d.from_dict(ev.h2d),
        precision=ProfilePrecision.from_dict(ev.precision),
        system=system,
        distributions=ProfileDistributions(step_time_ms=tuple(subsample(analysis.step_ms))),
    )


def _workload(ev: ProfileEvidence) -> ProfileWorkload:
    status = ev.exit_status
    exc = ev.exception
    return ProfileWorkload(
        exit_status=shell_exit_code(status),
        signal=-status if status is not None and status < 0 else None,
        stop_reason=ev.stop_reason,
        duration_s=round(ev.duration_s, 3),
        instrumented=ev.instrumented,
        torch_imported=ev.torch_imported,
        torch_version=ev.torch_version,
        cuda=ev.cuda,
        profile_kind="torch" if ev.torch_imported else "cpu-only",
        python_program=ev.python_program,
        exception=WorkloadException(
            type=str(exc.get("type")), module=exc.get("module"), message=str(exc.get("message", "")),
            file=exc.get("file"), line=exc.get("line"), function=exc.get("function"),
        ) if exc else None,
    )


def _headline(steps: ProfileSteps, throughput: ProfileThroughput, memory: ProfileMemory, system: ProfileSystem,
              *, cuda: bool) -> ProfileHeadline:
    """Flat numbers; step statistics only with steady steps, GPU numbers only on GPU."""
    steady = steps.steady > 0
    return ProfileHeadline(
        steps=steps.count,
        samples_per_s=throughput.samples_per_s if steady else None,
        steps_per_s=throughput.steps_per_s if steady else None,
        step_time_ms_p50=steps.step_time_ms.p50 if steady else None,
        step_time_ms_p90=steps.step_time_ms.p90 if steady else None,
        data_wait_fraction=steps.phase_fraction.data_wait if steady else None,
        peak_rss_mb=memory.peak_rss_mb,
        peak_tree_pss_mb=memory.peak_tree_pss_mb,  # the whole tree, shared pages counted once
        cuda_peak_mb=memory.cuda_peak_mb if cuda else None,
        gpu_util_mean_pct=system.gpu_util_mean_pct if cuda else None,
    )


def _steps(analysis: ProfileAnalysis) -> ProfileSteps:
    ev = analysis.evidence
    n_steady = len(analysis.steady)
    per_step = {name: _ms(value / n_steady) if n_steady else None for name, value in analysis.phase_s.items()}
    return ProfileSteps(
        count=analysis.steps[-1].index + 1 if analysis.steps else 0,  # steps may have been thinned out
        kept=len(analysis.steps),
        warmup=len(analysis.warmup),
        steady=n_steady,
        boundary=ev.step_mode,
        time_s=round(analysis.steps_time_s, 4),
        phase_ms_per_step=StepPhases(**per_step),
        phase_fraction=StepPhases(**{name: round(analysis.fraction(name), 4) for name in PHASES}),
        step_time_ms=_step_times(analysis),
        forwards=sum(s.forwards for s in analysis.steps),
        backwards=ev.backward_calls,
        optimizer_steps=ev.optimizer_steps,
    )


def _step_times(analysis: ProfileAnalysis) -> StepTimes:
    step_ms = analysis.step_ms
    warmup_ms = [1000.0 * s.duration_s for s in analysis.warmup]
    return StepTimes(
        p50=_round(percentile(step_ms, 50)),
        p90=_round(percentile(step_ms, 90)),
        p99=_round(percentile(step_ms, 99)),
        mean=_round(statistics.fmean(step_ms)) if step_ms else None,
        first=_round(1000.0 * analysis.steps[0].duration_s) if analysis.steps else None,
        warmup_mean=_round(statistics.fmean(warmup_ms)) if warmup_ms else None,
    )


def _throughput(analysis: ProfileAnalysis) -> ProfileThroughput:
    loader_batches = [d.batch_size for d in analysis.evidence.dataloaders if d.batch_size]
    return ProfileThroughput(
        samples_per_s=_round(analysis.samples_per_s, 2),
        steps_per_s=_round(analysis.steps_per_s, 2),
        batch_size=analysis.main.median_batch() if analysis.main else None,
        loader_batch_size=loader_batches[0] if loader_batches else None,
        samples=sum(s.samples for s in analysis.steps),
    )


def _memory(analysis: ProfileAnalysis) -> ProfileMemory:
    ev = analysis.evidence
    trend = analysis.memory
    rows = [(s.index, _mb(s.rss_bytes), _mb(s.heap_bytes), _mb(s.cuda_alloc_bytes))
            for s in analysis.steps if s.rss_bytes is not None or s.heap_bytes is not None]
    return ProfileMemory(
        peak_rss_mb=_mb(ev.peak_rss_bytes),
        peak_tree_pss_mb=_mb(ev.peak_tree_pss_bytes),
        child_processes=ev.child_processes,
        start_rss_mb=_mb(ev.memory.get("first_rss")),
        peak_heap_mb=_mb(ev.memory.get("peak_heap")),
        cuda_peak_mb=_mb(ev.memory.get("cuda_peak")),
        trend=ProfileMemoryTrend(
            source=trend.source,
            readings=trend.readings,
            growth_kb_per_step=round(trend.slope_bytes_per_step / 1e3, 2),
            growth_mb=_mb(trend.growth_bytes),
            r2=round(trend.r2, 3),
        ) if trend else None,
        timeline=ProfileMemoryTimeline(rows=tuple(_thin(rows))),
    )


def _model(ev: ProfileEvidence) -> ProfileModel:
    by_time = sorted(ev.modules, key=lambda m: -m.time_s)
    alloc = sorted(ev.alloc_sites, key=lambda a: -int(a.get("alive_bytes") or 0))[:MAX_LISTED]
    return ProfileModel(
        modules=tuple(_module(m) for m in [m for m in by_time if m.params > 0][:MAX_LISTED]),
        other_modules=tuple(OtherModule(cls=m.cls, calls=m.calls, time_ms=_ms(m.time_s), site=_main_site(m))
                            for m in [m for m in by_time if m.params == 0][:MAX_LISTED]),
        data_modules=dict(ev.data_modules),
        loads=tuple(ModelLoad(kind=x.kind, site=_site(x.file, x.line), calls=x.calls, time_ms=_ms(x.time_s))
                    for x in ev.loads),
        constructions=tuple(ModuleConstruction(cls=c.cls, site=_site(c.file, c.line), count=c.count, params=c.params)
                            for c in ev.constructions if c.count),
        alloc_sites=tuple(AllocSite(site=_site(a.get("file"), a.get("line")), sampled=a.get("sampled"),
                                    alive=a.get("alive"), alive_mb=_mb(a.get("alive_bytes"))) for a in alloc),
    )


def _module(m: ModuleUse) -> ModelModule:
    return ModelModule(
        cls=m.cls,
        params=m.params,
        device=m.device,
        dtype=m.dtype,
        input_dtypes=dict(m.input_dtypes),
        calls=m.calls,
        time_ms=_ms(m.time_s),
        batch_size=m.median_batch(),
        batch_dim=m.batch_dim,
        grad_calls=m.grad_calls,
        unused_grad_calls=m.unused_grad_calls,
        train_mode_calls=m.train_mode_calls,
        site=_main_site(m),
        call_sites=tuple(_call_site(c) for c in sorted(m.call_sites, key=lambda c: -c.calls)[:MAX_CALL_SITES]),
    )


def _call_site(c: CallSite) -> ModelCallSite:
    return ModelCallSite(
        site=_site(c.file, c.line),
        function=c.function or None,
        calls=c.calls,
        time_ms=_ms(c.time_s),
        batch_size=c.median_batch(),
        grad_calls=c.grad_calls,
        unused_grad_calls=c.unused_grad_calls,
        kept_graphs=c.kept_graphs,
        kept_held_mb=_mb(c.kept_held_bytes),
        train_mode_calls=c.train_mode_calls,
        train_mode_inference_calls=c.train_mode_inference_calls,
        sequential_calls=c.sequential_calls,
    )


def _syncs(analysis: ProfileAnalysis) -> tuple[HostSync, ...]:
    kept = max(1, len(analysis.steps))
    return tuple(
        HostSync(kind=s.kind, site=_site(s.file, s.line), calls=s.calls, per_step=round(s.calls / kept, 2),
                 time_ms=_ms(s.time_s), loop_ms=_ms(s.span_s))
        for s in sorted(analysis.evidence.syncs, key=lambda s: -s.calls)[:MAX_LISTED]
    )


def _dataloader(ev: ProfileEvidence) -> ProfileDataloader:
    fetch = ev.worker_fetch if ev.worker_fetch.get("items") else ev.fetch
    item_ms = 1000.0 * float(fetch.get("time_s", 0.0)) / fetch["items"] if fetch.get("items") else None
    return ProfileDataloader(
        loaders=tuple(
            DataLoaderUse(site=_site(d.file, d.line) if d.file else None, num_workers=d.num_workers,
                          pin_memory=d.pin_memory, persistent_workers=d.persistent_workers,
                          prefetch_factor=d.prefetch_factor, batch_size=d.batch_size, dataset=d.dataset,
                          iterators=d.iterators, batches=d.batches, wait_ms=_ms(d.wait_s))
            for d in ev.dataloaders
        ),
        item_time_ms=_round(item_ms, 4),
        worker_processes=ev.worker_fetch.get("workers", 0),
    )


def _system(analysis: ProfileAnalysis) -> ProfileSystem:
    samples = analysis.evidence.system
    cpu_means = [statistics.fmean(s.cpu_percent) for s in samples if s.cpu_percent]
    cores = max((len(s.cpu_percent) for s in samples), default=0)
    return ProfileSystem(
        cores=analysis.cores,
        cpu_percent_mean=_round(statistics.fmean(cpu_means), 1) if cpu_means else None,
        cpu_percent_per_core=tuple(
            round(statistics.fmean(s.cpu_percent[i] for s in samples if len(s.cpu_percent) > i), 1)
            for i in range(cores)
        ),
        gpu_util_mean_pct=_round(analysis.gpu_util_mean, 1),
        timeline=ProfileSystemTimeline(rows=_system_rows(analysis)),
    )


def _system_rows(analysis: ProfileAnalysis) -> tuple[tuple[float, int | None, float | None, float | None,
                                                           float | None], ...]:
    """One row per machine sample (at most MAX_TIMELINE), with the step that was running."""
    samples = analysis.evidence.system
    t0 = samples[0].t if samples else 0.0
    return tuple(
        (
            round(sample.t - t0, 2),
            next((s.index for s in analysis.steps if s.start <= sample.t <= s.end), None),
            round(statistics.fmean(sample.cpu_percent), 1) if sample.cpu_percent else None,
            sample.process_cpu_percent,
            round(statistics.fmean(sample.gpu_util_percent), 1) if sample.gpu_util_percent else None,
        )
        for sample in _thin(samples)
    )
