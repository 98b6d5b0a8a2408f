"""Hand-built evidence for rule and analysis tests (values in the shape a real run records)."""

from __future__ import annotations

from typing import Any

from infradoctor.profile.evidence import (
    Construction,
    LoaderConfig,
    LoadEvent,
    ModuleUse,
    ProfileEvidence,
    StepRecord,
    SyncSite,
    SystemSample,
)


def steps(n: int, *, duration: float = 0.010, start: float = 100.0, first: float | None = None,
          heap_growth: int = 0, every_memory: int = 1, **phases: float) -> tuple[StepRecord, ...]:
    """``n`` steps of ``duration`` seconds with the given phase seconds (data_wait_s=..., forward_s=...)."""
    out = []
    t = start
    for i in range(n):
        d = first if (i == 0 and first is not None) else duration
        mem: dict[str, Any] = {}
        if i % every_memory == 0:
            mem = {"rss_bytes": 300_000_000 + i * heap_growth, "heap_bytes": 50_000_000 + i * heap_growth}
        out.append(StepRecord(index=i, start=t, end=t + d, samples=32,
                              forwards=1, **phases, **mem))
        t += d
    return tuple(out)


def module(**kw: Any) -> ModuleUse:
    base: dict[str, Any] = {
        "id": 1, "cls": "Net", "params": 100_000, "trainable": True, "mode_layers": (), "device": "cpu",
        "dtype": "float32", "calls": 100, "time_s": 0.5, "grad_calls": 100, "unused_grad_calls": 0,
        "train_mode_calls": 100, "train_mode_inference_calls": 0, "batch_sizes": {"32": 100},
        "sites": ({"file": "/work/app/train.py", "line": 42, "calls": 3},),
    }
    base.update(kw)
    return ModuleUse(**base)


def loader(**kw: Any) -> LoaderConfig:
    base: dict[str, Any] = {
        "file": "/work/app/train.py", "line": 30, "num_workers": 0, "pin_memory": False,
        "persistent_workers": False, "prefetch_factor": None, "batch_size": 32, "dataset": "ImageFiles",
        "dataset_len": 3200, "iterators": 1, "batches": 100, "wait_s": 0.7,
    }
    base.update(kw)
    return LoaderConfig(**base)


def evidence(**kw: Any) -> ProfileEvidence:
    base: dict[str, Any] = {
        "argv": ("python", "train.py"), "exit_status": 0, "stop_reason": "exit", "duration_s": 3.0,
        "instrumented": True, "torch_imported": True, "torch_version": "2.13.0", "step_mode": "optimizer",
        "steps": steps(100, forward_s=0.004, backward_s=0.004, optimizer_s=0.001),
        "modules": (module(),), "main_module": 1, "backward_calls": 100, "optimizer_steps": 100,
        "dataloaders": (loader(wait_s=0.05),),
        "system": tuple(SystemSample(t=100.0 + 0.5 * i, cpu_percent=(50.0, 60.0), process_cpu_percent=99.0,
                                     rss_bytes=300_000_000) for i in range(3)),
    }
    base.update(kw)
    return ProfileEvidence(**base)


__all__ = ["Construction", "LoadEvent", "SyncSite", "evidence", "loader", "module", "steps"]
