"""Sections of a profile result for every renderer, read from its typed metrics.

The step-time bar, throughput and memory, model use, model loading, host reads, DataLoader; for ``--load-url`` the
service's sections follow (:mod:`infradoctor.report.present.serve`).
"""

from __future__ import annotations

from infradoctor.metrics import MetricsError
from infradoctor.profile.metrics import ProfileMetrics
from infradoctor.report.present.serve import service_sections
from infradoctor.report.sections import Bar, Cell, Section, Table, format_value
from infradoctor.result import Result

_PHASE_LABELS = {
    "data_wait": "data wait",
    "h2d": "H2D copy",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "sync": "host sync",
    "load": "model load",
    "other": "other Python",
}

TIME_TITLE = "Where the time goes"


def sections(result: Result) -> list[Section]:
    """Step breakdown, throughput and memory, model use, host reads, DataLoader, then the service's sections."""
    if not result.metrics:
        return []
    try:
        metrics = ProfileMetrics.from_dict(result.metrics)
    except MetricsError as exc:
        return [Section(TIME_TITLE, lines=(f"metrics could not be read: {exc}",))]
    out = [time_section(metrics)]
    for build in (model_section, loading_section, syncs_section, dataloader_section):
        section = build(metrics)
        if section is not None:
            out.append(section)
    out.extend(service_sections(result, metrics))  # profile --load-url: load sweep, event loop, workers
    return out


def _workload_lines(metrics: ProfileMetrics) -> list[str]:
    w = metrics.workload
    lines = [f"workload exit status {w.exit_status} ({w.stop_reason}), {w.duration_s} s, profile: {w.profile_kind}"]
    if not w.python_program:
        lines.append("Not a Python program: only Python is instrumented (CPU and memory measured from outside).")
    elif not w.torch_imported:
        lines.append("The workload never imported torch: CPU-only profile (no steps, model or data evidence).")
    return lines


def _measures(metrics: ProfileMetrics) -> list[tuple[str, Cell]]:
    steps, times = metrics.steps, metrics.steps.step_time_ms
    memory, system = metrics.memory, metrics.system
    rows: list[tuple[str, Cell]] = [
        ("steps (warm-up / steady)", f"{steps.count} ({steps.warmup} / {steps.steady})"),
        ("step time p50 / p90 / p99 ms", " / ".join(format_value(v) for v in (times.p50, times.p90, times.p99))
         if times.p50 is not None else None),
        ("first step ms", times.first),
        ("samples/s", metrics.throughput.samples_per_s),
        ("batch size", metrics.throughput.batch_size),
        ("peak RSS MB", memory.peak_rss_mb),
        ("memory growth KB/step", memory.trend.growth_kb_per_step if memory.trend else None),
    ]
    if memory.cuda_peak_mb is not None:
        rows.append(("CUDA peak MB", memory.cuda_peak_mb))
    if system.cpu_percent_mean is not None:
        rows.append(("CPU % (mean over cores)", system.cpu_percent_mean))
    if system.gpu_util_mean_pct is not None:
        rows.append(("GPU util %", system.gpu_util_mean_pct))
    return rows


def time_section(metrics: ProfileMetrics) -> Section:
    """The step-time bar (steady steps), the key measures and how the workload ended."""
    parts = [(_PHASE_LABELS[name], float(ms)) for name, ms in metrics.steps.phase_ms_per_step.items() if ms]
    bars = [Bar(parts=parts, title=f"Step time per steady step (steps marked by {metrics.steps.boundary})",
                unit=" ms")] if parts else []
    return Section(TIME_TITLE, bars=bars, tables=[Table(("measure", "value"), _measures(metrics))],
                   lines=_workload_lines(metrics))


def model_section(metrics: ProfileMetrics) -> Section | None:
    """Top-level models: calls, batch, autograd and train mode, time, the line that called them most."""
    modules = metrics.model.modules
    if not modules:
        return None
    return Section("Model use", tables=[Table(
        ("module", "params", "calls", "batch", "grad calls", "unused grad", "train mode", "time ms", "site"),
        [(m.cls, m.params, m.calls, m.batch_size, m.grad_calls, m.unused_grad_calls, m.train_mode_calls, m.time_ms,
          m.site) for m in modules[:6]],
    )])


def loading_section(metrics: ProfileMetrics) -> Section | None:
    """Weight loading by call site."""
    loads = metrics.model.loads
    if not loads:
        return None
    return Section("Model loading", tables=[Table(
        ("call", "site", "calls", "time ms"), [(x.kind, x.site, x.calls, x.time_ms) for x in loads[:6]],
    )])


def syncs_section(metrics: ProfileMetrics) -> Section | None:
    """Host reads of tensor values by line."""
    syncs = metrics.syncs
    if not syncs:
        return None
    return Section("Host reads of tensor values", tables=[Table(
        ("call", "site", "calls", "per step", "loop ms"),
        [(s.kind, s.site, s.calls, s.per_step, s.loop_ms) for s in syncs[:6]],
    )])


def dataloader_section(metrics: ProfileMetrics) -> Section | None:
    """DataLoader configuration and waits, and the time per dataset item."""
    data = metrics.dataloader
    if not data.loaders:
        return None
    return Section("DataLoader", tables=[Table(
        ("site", "workers", "pin", "persistent", "batch", "batches", "wait ms"),
        [(d.site, d.num_workers, d.pin_memory, d.persistent_workers, d.batch_size, d.batches, d.wait_ms)
         for d in data.loaders[:4]],
    )], lines=[f"dataset item time {data.item_time_ms} ms"])
