"""Worker layout of a server: its worker processes and each one's memory (RSS, private USS, GPU via NVML).

The server's process tree is read with psutil. Helper processes of multiprocessing (resource tracker, fork server)
are left out. Starting at the root, a process with exactly one child is a wrapper (``sh -c``, a launcher, gunicorn
with one worker) and the walk descends into the child; a process with two or more children is a supervisor and its
children are the workers; a process without children is the only worker.

GPU memory per process comes from NVML (``nvmlDeviceGetComputeRunningProcesses`` on every device, the numbers that
``nvidia-smi --query-compute-apps=pid,used_memory --format=csv`` prints). Without NVML or a GPU it is "not
available" (None), never an error.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import psutil

from infradoctor.node.gpu.nvml import NA, NvmlQuery, load_pynvml

MB = 1024 * 1024

HELPER_MARKERS = ("multiprocessing.resource_tracker", "multiprocessing.semaphore_tracker", "multiprocessing.forkserver")
"""Command-line fragments of helper processes that are never workers."""


@dataclass(frozen=True)
class WorkerProcess:
    """One worker process and its memory."""

    pid: int
    """Process id."""
    command: str
    """Command line, shortened to 200 characters."""
    rss_mb: float | None
    """Resident set size in MiB (includes pages shared with other processes); None when unreadable."""
    private_mb: float | None
    """Unique set size in MiB (memory only this process holds); None when unreadable."""
    gpu_memory_mb: float | None
    """GPU memory this process holds, summed over devices, in MiB; None when NVML is not available."""
    anon_mb: float | None = None
    """Anonymous memory in MiB (heap, tensors it made: what a worker's own copy of a model takes; library pages and
    weights mapped from a file are not in it); None when unreadable."""
    torch_loaded: bool | None = None
    """Whether the process has torch's library mapped (None when unreadable)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"pid": self.pid, "command": self.command, "rss_mb": self.rss_mb, "private_mb": self.private_mb,
                "gpu_memory_mb": self.gpu_memory_mb, "anon_mb": self.anon_mb, "torch_loaded": self.torch_loaded}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerProcess:
        """Inverse of :meth:`to_dict`."""
        return cls(int(data["pid"]), str(data.get("command", "")), data.get("rss_mb"), data.get("private_mb"),
                   data.get("gpu_memory_mb"), data.get("anon_mb"), data.get("torch_loaded"))


@dataclass(frozen=True)
class WorkerLayout:
    """How a server is laid out in processes."""

    root_pid: int
    """The process the layout was read from (the one that was started)."""
    supervisor_pid: int | None
    """The process that supervises the workers; None for a single-process server."""
    workers: tuple[WorkerProcess, ...]
    """The worker processes (one for a single-process server)."""
    gpu_available: bool
    """Whether NVML answered, i.e. whether ``gpu_memory_mb`` values are measured."""
    baseline_anon_mb: float | None = None
    """Anonymous memory of a fresh process of the workers' interpreter that imported what they import of torch
    (:func:`interpreter_baseline`): what each worker holds without any model; None when not measured."""
    baseline: str | None = None
    """What the baseline process ran (``python3.10 -I -c 'import torch'``)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"root_pid": self.root_pid, "supervisor_pid": self.supervisor_pid,
                "workers": [w.to_dict() for w in self.workers], "gpu_available": self.gpu_available,
                "baseline_anon_mb": self.baseline_anon_mb, "baseline": self.baseline}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerLayout:
        """Inverse of :meth:`to_dict`."""
        return cls(int(data["root_pid"]), data.get("supervisor_pid"),
                   tuple(WorkerProcess.from_dict(w) for w in data.get("workers", ())),
                   bool(data.get("gpu_available", False)), data.get("baseline_anon_mb"), data.get("baseline"))


def nvml_gpu_memory_by_pid(nvml: Any | None = None) -> dict[int, int] | None:
    """GPU memory in bytes per process id over all devices, or None when NVML is not available.

    Every call goes through the project's NVML query helper (:class:`~infradoctor.node.gpu.nvml.NvmlQuery`):
    an NVMLError is "not available", never a crash.

    Args:
        nvml: the ``pynvml`` module (from nvidia-ml-py), or a :class:`~infradoctor.node.gpu.nvml.ReplayNvml` of
            recorded values; the installed ``pynvml`` when None.
    """
    lib = nvml if nvml is not None else load_pynvml()
    if lib is None:
        return None
    query = NvmlQuery(lib)
    if query("nvmlInit") is NA:  # library not found, driver not loaded, ...: no GPU here
        return None
    try:
        count = query("nvmlDeviceGetCount")
        if count is NA:
            return None
        used: dict[int, int] = {}
        for index in range(int(count)):
            handle = query("nvmlDeviceGetHandleByIndex", index)
            if handle is NA:  # e.g. GPU is lost
                continue
            for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                for proc in query(getter, handle, default=[]) or []:  # not supported: skip that view
                    memory = getattr(proc, "usedGpuMemory", None)
                    if isinstance(memory, int) and memory >= 0:  # NVML reports N/A as None
                        used[int(proc.pid)] = used.get(int(proc.pid), 0) + memory
        return used
    finally:
        query("nvmlShutdown")


def _is_helper(proc: psutil.Process) -> bool:
    try:
        cmdline = " ".join(proc.cmdline())
    except (psutil.Error, OSError):
        return True  # gone or unreadable: not a worker we can measure
    return any(marker in cmdline for marker in HELPER_MARKERS)


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        kids = proc.children()
    except (psutil.Error, OSError):
        return []
    return sorted((k for k in kids if not _is_helper(k)), key=lambda p: p.pid)


def _measure(proc: psutil.Process, gpu: Mapping[int, int] | None) -> WorkerProcess:
    command = ""
    rss = private = None
    with contextlib.suppress(psutil.Error, OSError):
        command = " ".join(proc.cmdline())[:200]
    try:
        info = proc.memory_full_info()
        rss, private = info.rss / MB, getattr(info, "uss", 0) / MB
    except (psutil.Error, OSError):
        with contextlib.suppress(psutil.Error, OSError):
            rss = proc.memory_info().rss / MB
    gpu_mb = None if gpu is None else gpu.get(proc.pid, 0) / MB
    return WorkerProcess(proc.pid, command, rss, private, gpu_mb, anonymous_mb(proc.pid), torch_loaded(proc.pid))


def anonymous_mb(pid: int) -> float | None:
    """Anonymous memory of a process in MiB, from ``/proc/PID/smaps_rollup`` (None when unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Anonymous:"):
                    return int(line.split()[1]) * 1024 / MB
    except (OSError, ValueError, IndexError):
        return None
    return None


def torch_loaded(pid: int) -> bool | None:
    """Whether the process maps torch's C++ library (None when its maps are unreadable)."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            return any("libtorch" in line for line in fh)
    except OSError:
        return None


BASELINE_TIMEOUT_S = 60.0
"""Bound on the baseline process (importing a CUDA build of torch takes a few seconds)."""

_BASELINE_SCRIPT = (
    "import sys\n"
    "if sys.argv[1] == 'torch':\n    import torch\n"
    "for line in open('/proc/self/smaps_rollup'):\n"
    "    if line.startswith('Anonymous:'):\n        print(line.split()[1])\n"
)


def _interpreter(pid: int) -> str | None:
    """The program a process runs, as its command line names it.

    A virtual environment's ``python`` is a link to the base interpreter, which ``exe`` resolves to and which
    lacks the environment's packages.
    """
    import shutil

    try:
        proc = psutil.Process(pid)
        argv0 = (proc.cmdline() or [""])[0]
        named = argv0 if os.path.isabs(argv0) else shutil.which(argv0) if argv0 else None
        return named if named and os.access(named, os.X_OK) else proc.exe() or None
    except (psutil.Error, OSError):
        return None


def interpreter_baseline(layout: WorkerLayout, timeout_s: float = BASELINE_TIMEOUT_S) -> WorkerLayout:
    """The layout with its baseline: what each worker would hold without a model of its own.

    That is the anonymous memory of a fresh process of the workers' interpreter after importing torch (when the
    workers have it loaded) or nothing.

    Importing torch alone makes 150 MB of anonymous memory with the CPU build and 280 MB with the CUDA build (the
    build pip installs by default on Linux), so a fixed threshold took two workers of a 1,000-parameter model for
    two model copies. Runs ``python -I`` (no PYTHONPATH: none of the profiler's injection); the layout unchanged
    when the interpreter cannot be found or the process fails.
    """
    import subprocess

    workers = layout.workers
    if not workers:
        return layout
    exe = _interpreter(workers[0].pid)
    if exe is None:
        return layout
    with_torch = any(w.torch_loaded for w in workers)
    what = "torch" if with_torch else "nothing"
    try:
        done = subprocess.run([exe, "-I", "-c", _BASELINE_SCRIPT, what],  # noqa: S603
                              capture_output=True, text=True, timeout=timeout_s, check=False)
        kb = int(done.stdout.split()[-1]) if done.returncode == 0 and done.stdout.split() else None
    except (OSError, subprocess.SubprocessError, ValueError):
        kb = None
    if kb is None:
        return layout
    name = os.path.basename(exe)
    ran = f"{name} -I -c 'import torch'" if with_torch else f"{name} -I -c pass"
    return replace(layout, baseline_anon_mb=round(kb * 1024 / MB, 1), baseline=ran)


def worker_layout(
    root_pid: int,
    *,
    gpu_memory_by_pid: Mapping[int, int] | None | Callable[[], Mapping[int, int] | None] = nvml_gpu_memory_by_pid,
    max_depth: int = 8,
) -> WorkerLayout:
    """Read the worker layout of the server whose process tree starts at ``root_pid``.

    Args:
        root_pid: the server's top process.
        gpu_memory_by_pid: bytes of GPU memory per pid, or a function returning them (default: NVML); None for
            "not available".
        max_depth: bound on how many single-child wrappers are descended through.

    Raises:
        psutil.NoSuchProcess: the root process does not exist.
    """
    gpu = gpu_memory_by_pid() if callable(gpu_memory_by_pid) else gpu_memory_by_pid
    node = psutil.Process(root_pid)
    for _ in range(max_depth):
        kids = _children(node)
        if not kids:
            return WorkerLayout(root_pid, None, (_measure(node, gpu),), gpu is not None)
        if len(kids) == 1:
            node = kids[0]
            continue
        return WorkerLayout(root_pid, node.pid, tuple(_measure(k, gpu) for k in kids), gpu is not None)
    return WorkerLayout(root_pid, None, (_measure(node, gpu),), gpu is not None)
