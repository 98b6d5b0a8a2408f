"""Sections of a profile result for every renderer: step-time bar, throughput, memory, model use, host reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.report.present.serve import service_sections
from infradoctor.report.sections import Bar, Section, Table, format_value
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


def _get(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping


def sections(result: Result) -> list[Section]:
    """Step breakdown, throughput and memory, model use, host reads, DataLoader."""
    metrics = result.metrics
    out: list[Section] = []
    workload = _get(metrics, "workload") or {}
    steps = _get(metrics, "steps") or {}
    per_step = _get(steps, "phase_ms_per_step") or {}
    lines = [
        f"workload exit status {workload.get('exit_status')} ({workload.get('stop_reason')}), "
        f"{workload.get('duration_s')} s, profile: {workload.get('profile_kind')}"
    ]
    if workload.get("python_program") is False:
        lines.append("Not a Python program: only Python is instrumented (CPU and memory measured from outside).")
    elif not workload.get("torch_imported"):
        lines.append("The workload never imported torch: CPU-only profile (no steps, model or data evidence).")
    parts = [(_PHASE_LABELS[k], float(v)) for k, v in per_step.items() if v]
    bars = [Bar(parts=parts, title=f"Step time per steady step (steps marked by {steps.get('boundary')})",
                unit=" ms")] if parts else []
    step_ms = _get(steps, "step_time_ms") or {}
    throughput = _get(metrics, "throughput") or {}
    memory = _get(metrics, "memory") or {}
    trend = memory.get("trend") or {}
    rows = [
        ("steps (warm-up / steady)", f"{steps.get('count', 0)} ({steps.get('warmup', 0)} / {steps.get('steady', 0)})"),
        ("step time p50 / p90 / p99 ms", " / ".join(format_value(step_ms.get(k)) for k in ("p50", "p90", "p99"))
         if step_ms.get("p50") is not None else None),
        ("first step ms", step_ms.get("first")),
        ("samples/s", throughput.get("samples_per_s")),
        ("batch size", throughput.get("batch_size")),
        ("peak RSS MB", memory.get("peak_rss_mb")),
        ("memory growth KB/step", trend.get("growth_kb_per_step")),
    ]
    if memory.get("cuda_peak_mb") is not None:
        rows.append(("CUDA peak MB", memory.get("cuda_peak_mb")))
    system = _get(metrics, "system") or {}
    if system.get("cpu_percent_mean") is not None:
        rows.append(("CPU % (mean over cores)", system.get("cpu_percent_mean")))
    if system.get("gpu_util_mean_pct") is not None:
        rows.append(("GPU util %", system.get("gpu_util_mean_pct")))
    out.append(Section("Where the time goes", bars=bars, tables=[Table(("measure", "value"), rows)], lines=lines))
    modules = _get(metrics, "model", "modules") or []
    if modules:
        out.append(Section("Model use", tables=[Table(
            ("module", "params", "calls", "batch", "grad calls", "unused grad", "train mode", "time ms", "site"),
            [(m.get("class"), m.get("params"), m.get("calls"), m.get("batch_size"), m.get("grad_calls"),
              m.get("unused_grad_calls"), m.get("train_mode_calls"), m.get("time_ms"), m.get("site"))
             for m in modules[:6]],
        )]))
    loads = _get(metrics, "model", "loads") or []
    if loads:
        out.append(Section("Model loading", tables=[Table(
            ("call", "site", "calls", "time ms"),
            [(x.get("kind"), x.get("site"), x.get("calls"), x.get("time_ms")) for x in loads[:6]],
        )]))
    syncs = _get(metrics, "syncs") or []
    if syncs:
        out.append(Section("Host reads of tensor values", tables=[Table(
            ("call", "site", "calls", "per step", "loop ms"),
            [(s.get("kind"), s.get("site"), s.get("calls"), s.get("per_step"), s.get("loop_ms")) for s in syncs[:6]],
        )]))
    loaders = _get(metrics, "dataloader", "loaders") or []
    if loaders:
        out.append(Section("DataLoader", tables=[Table(
            ("site", "workers", "pin", "persistent", "batch", "batches", "wait ms"),
            [(d.get("site"), d.get("num_workers"), d.get("pin_memory"), d.get("persistent_workers"),
              d.get("batch_size"), d.get("batches"), d.get("wait_ms")) for d in loaders[:4]],
        )], lines=[f"dataset item time {_get(metrics, 'dataloader', 'item_time_ms')} ms"]))
    out.extend(service_sections(result))  # profile --load-url: load sweep, event loop, workers
    return out
