"""S004 model-copy-per-worker: each server worker process holds its own copy of the model.

What it detects:
    A server runs two or more worker processes (uvicorn ``--workers``, gunicorn) and every one of them holds a
    similar, large amount of memory of its own: at least ``MIN_GPU_MB`` of GPU memory each, or, without GPU memory,
    at least ``MIN_OWN_MB`` of anonymous host memory each beyond what a fresh process of the same interpreter holds
    after importing torch (else, without that baseline, ``MIN_PRIVATE_MB`` of private memory each), with the
    smallest at least ``SIMILARITY`` of the largest.

Why it matters:
    Each worker loads the model separately: memory use multiplies with the worker count (on a GPU, N copies of the
    weights and N CUDA contexts compete for one device), start-up takes N loads, and the workers cannot batch
    requests together.

How it is measured:
    :func:`~infradoctor.serve.workers.worker_layout` walks the server's process tree (psutil) to its workers and
    reads each one's RSS and unique set size (USS: pages no other process shares) and, through NVML, the GPU memory
    each process holds. Preloading the model before fork shares its pages, which keeps USS low; separate loads do
    not. Importing torch alone makes 150 MB of anonymous memory with the CPU build and 280 MB with the CUDA build
    (pip's default on Linux), so the host reading is each worker's anonymous memory less a baseline measured in the
    same run (:func:`~infradoctor.serve.workers.interpreter_baseline`): with a fixed threshold, two workers of a
    1,000-parameter model under the CUDA build were "288 MB duplicated". The duplicated memory is (workers - 1) x
    the smallest worker's holding.

Fix:
    Use one worker per GPU with asynchronous batching, or share the weights: load before forking (gunicorn
    ``--preload``), or move the model into a model server that the web workers call.
"""

from __future__ import annotations

from dataclasses import dataclass

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.serve.workers import WorkerLayout

RULE = Rule(
    "S004",
    "model-copy-per-worker",
    Severity.MEDIUM,
    "Each worker process holds its own model copy",
    fix="Use one worker per GPU with async batching, or share weights (preload + fork, or a model server).",
    risk="Fewer workers means less CPU parallelism for pre/post-processing.",
    commands=("profile",),
)

MIN_WORKERS = 2
"""Fewer workers cannot duplicate anything."""

MIN_GPU_MB = 512.0
"""GPU memory per worker from which each worker is taken to hold a model (a CUDA context alone is ~300-500 MB)."""

MIN_PRIVATE_MB = 256.0
"""Without a baseline: private host memory per worker from which each is taken to hold a model (torch alone takes
~225 MB of USS with the CPU build, ~290 MB with the CUDA build)."""

MIN_OWN_MB = 48.0
"""Anonymous host memory per worker beyond the baseline from which each is taken to hold a model of its own (the
web framework itself adds 10-30 MB)."""

SIMILARITY = 0.5
"""Smallest / largest holding from which the workers count as holding copies of the same thing."""


@dataclass(frozen=True)
class Options:
    """Thresholds of S004 (defaults are the documented constants)."""

    min_workers: int = MIN_WORKERS
    """See ``MIN_WORKERS``."""
    min_gpu_mb: float = MIN_GPU_MB
    """See ``MIN_GPU_MB``."""
    min_private_mb: float = MIN_PRIVATE_MB
    """See ``MIN_PRIVATE_MB``."""
    min_own_mb: float = MIN_OWN_MB
    """See ``MIN_OWN_MB``."""
    similarity: float = SIMILARITY
    """See ``SIMILARITY``."""


def _copies(values: list[float | None], minimum: float, similarity: float) -> list[float] | None:
    """The values when every one is measured, at least ``minimum`` and similar to the others; else None."""
    if not values or any(v is None for v in values):
        return None
    measured = [float(v) for v in values if v is not None]
    if min(measured) < minimum or min(measured) < similarity * max(measured):
        return None
    return measured


@RULE.check(WorkerLayout, Options)
def check(layout: WorkerLayout, options: Options | None = None) -> list[Finding]:
    """S004 when two or more workers each hold a similar, large amount of GPU or private host memory."""
    opts = options or Options()
    workers = layout.workers
    if len(workers) < opts.min_workers:
        return []
    gpu = _copies([w.gpu_memory_mb for w in workers], opts.min_gpu_mb, opts.similarity) \
        if layout.gpu_available else None
    base = layout.baseline_anon_mb
    own = base is not None and all(w.anon_mb is not None for w in workers)
    host = None
    if gpu is None and own:
        host = _copies([max(0.0, float(w.anon_mb or 0.0) - float(base or 0.0)) for w in workers], opts.min_own_mb,
                       opts.similarity)
    elif gpu is None:
        host = _copies([w.private_mb for w in workers], opts.min_private_mb, opts.similarity)
    held = gpu if gpu is not None else host
    if held is None:
        return []
    basis = "gpu" if gpu is not None else "host"
    duplicated = (len(held) - 1) * min(held)
    kind = "GPU memory" if basis == "gpu" else (
        "host memory of their own (beyond a bare process with torch)" if own else "private host memory")
    title = (
        f"{len(workers)} worker processes each hold {min(held):.0f}-{max(held):.0f} MB of {kind} "
        f"(~{duplicated:.0f} MB duplicated)"
    )
    evidence = {
        "workers": len(workers),
        "basis": basis,
        "per_worker_mb": [round(v, 1) for v in held],
        "duplicated_mb": round(duplicated, 1),
        "supervisor_pid": layout.supervisor_pid,
        "baseline_anon_mb": base if basis == "host" and own else None,
        "processes": [w.to_dict() for w in workers],
    }
    severity = Severity.HIGH if basis == "gpu" else None
    return [RULE.finding(
            title, evidence, severity=severity)]
