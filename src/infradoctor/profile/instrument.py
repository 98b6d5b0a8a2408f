"""In-process instrumentation of a PyTorch workload: runs inside the profiled child, stdlib and torch only.

Mechanisms (chosen from measured overheads, see the profile README section):

- top-level ``nn.Module`` discovery with global forward hooks, dropped after a quiet spell and re-armed when a
  Module is built, then a wrapper on each top-level instance's ``forward`` (grad mode, inference mode,
  ``.training``, batch size and time per top-level call);
- patched ``torch.autograd.backward``/``grad`` and global optimizer step hooks;
- patched Tensor sync methods (``item``, ``tolist``, ``cpu``, ``numpy``, ``__bool__``, ``__iter__``, ...), counted
  per call site (code object + line) from user code only;
- a timer around ``_BaseDataLoaderIter.__next__`` (data wait), the DataLoader's configuration, dataset fetch time
  (also inside worker processes);
- patched ``torch.load``, ``Module.load_state_dict``, ``from_pretrained`` and Module construction call sites;
- per-step memory (``/proc/self/statm`` and glibc ``mallinfo2``, at most 20 reads/s; CUDA allocator stats on GPU);
- sampled survival of top-level forward outputs (weakref finalizers, a bounded budget) and, once memory growth is
  suspected, allocation sites sampled with a TorchDispatchMode over single steps (<= 2% of run time): the leak site.

Evidence goes to files in the events folder: ``<pid>.steps.jsonl`` (one JSON array of steps per flush) and
``<pid>.state.json`` (aggregates, atomically replaced about once a second and at exit), ``<pid>.worker.json`` from
DataLoader workers. A failure inside the instrumentation is reported once on stderr and never breaks the workload.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import inspect
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

EVENTS_DIR_ENV = "INFRADOCTOR_PROFILE_DIR"
"""Environment variable naming the events folder; instrumentation is active only where it is set."""
MAX_STEPS_ENV = "INFRADOCTOR_PROFILE_MAX_STEPS"
NO_ALLOC_SAMPLING_ENV = "INFRADOCTOR_PROFILE_NO_ALLOC_SAMPLING"
"""Set for servers under load: the dispatch mode's one-time import (~1-2 s) would stall a request being timed."""
"""When set, the workload is interrupted (SIGINT) after this many steps."""
START_ERROR_FILE = "start-error.txt"
"""File the runner writes into the events folder when the program cannot start (e.g. ``-m`` names no module)."""
STOP_MARKER = "stop-requested"
"""File the launcher writes into the events folder before it stops the workload (its SIGINT is then no error)."""

DISCOVERY_QUIET_CALLS = 50
"""Top-level calls without a new top-level module after which the global discovery hooks are dropped."""
SITE_RESOLVE_CALLS = 3
"""A top-level module's call sites are resolved (stack walk) only for its first few calls."""
MEMORY_READ_INTERVAL_S = 0.05
"""At most 20 memory reads per second (each costs a few microseconds)."""
FLUSH_INTERVAL_S = 1.0
"""Evidence files are rewritten about once a second (and at exit)."""
STEP_BUFFER_FLUSH = 1024
"""... or as soon as this many step records wait to be written."""
RETENTION_SAMPLE_INTERVAL_S = 0.05
"""At most one top-level forward output every 50 ms gets a survival finalizer."""
RETENTION_MAX_LIVE = 2000
"""At most this many sampled outputs are watched at once."""
WORKER_FLUSH_INTERVAL_S = 0.5
"""DataLoader workers end with os._exit: they write their evidence this often and in a finally."""
ALLOC_DUTY_CYCLE = 0.02
"""Share of run time that allocation-site sampling (a TorchDispatchMode over one step) may take."""
ALLOC_MIN_BYTES = 4096
"""Allocations smaller than this are not followed."""
GROWTH_WINDOW = 5
"""Memory readings that must rise (by GROWTH_SUSPECT_BYTES) before allocation sites are sampled."""
GROWTH_SUSPECT_BYTES = 2 * 1024 * 1024
"""Rise over the window that makes growth suspect."""

_MODE_RANK = {None: 0, "forward": 1, "dataloader": 2, "optimizer": 3}

_state_lock = threading.Lock()
_torch: Any = None
"""The torch module, once imported by the workload (hot paths avoid an import statement per call)."""
_recorder: Recorder | None = None
_local = threading.local()


def _warn_once(key: str, exc: BaseException) -> None:
    rec = _recorder
    seen = rec.errors if rec is not None else {}
    if key in seen:
        seen[key]["count"] += 1
        return
    seen[key] = {"source": key, "message": f"{type(exc).__name__}: {exc}", "count": 1}
    with contextlib.suppress(Exception):
        sys.stderr.write(
            f"infradoctor profile: instrumentation error in {key} (ignored): {type(exc).__name__}: {exc}\n"
        )


class _Memory:
    """Cheap process memory reads: RSS from /proc/self/statm, heap from glibc mallinfo2."""

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.fd: int | None = None
        with contextlib.suppress(OSError):
            self.fd = os.open("/proc/self/statm", os.O_RDONLY)
        self.mallinfo2: Any = None
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None)
            fn = libc.mallinfo2

            class _MallInfo2(ctypes.Structure):
                _fields_ = [  # noqa: RUF012 - ctypes layout
                    (name, ctypes.c_size_t)
                    for name in (
                        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                        "fordblks", "keepcost",
                    )
                ]

            fn.restype = _MallInfo2
            fn.argtypes = []
            fn()
            self.mallinfo2 = fn

    def rss(self) -> int | None:
        if self.fd is None:
            return None
        try:
            fields = os.pread(self.fd, 128, 0).split()
            return int(fields[1]) * self.page
        except (OSError, IndexError, ValueError):
            return None

    def heap(self) -> int | None:
        if self.mallinfo2 is None:
            return None
        info = self.mallinfo2()
        return int(info.uordblks + info.hblkhd)


class _ModuleStats:
    """Per top-level module instance."""

    __slots__ = (
        "key", "cls", "params", "trainable", "mode_layers", "device", "dtype", "calls", "time", "grad_calls",
        "unused_grad", "pending_grad", "train_calls", "train_inference_calls", "batches", "sites", "autocast_calls",
        "retained_sampled", "retained_freed", "ref", "input_dtypes",
    )

    def __init__(self, key: int, module: Any) -> None:
        self.key = key
        self.cls = type(module).__name__
        self.params = 0
        self.trainable = False
        self.mode_layers: list[str] = []
        self.device = "cpu"
        self.dtype = ""
        with contextlib.suppress(Exception):
            for p in module.parameters():
                self.params += int(p.numel())
                self.trainable = self.trainable or bool(p.requires_grad)
                if not self.dtype:
                    self.dtype = str(p.dtype).replace("torch.", "")
                    self.device = p.device.type
            import torch.nn as nn

            kinds = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._NormBase)
            names = {type(m).__name__ for m in module.modules() if isinstance(m, kinds)}
            self.mode_layers = sorted(names)
        self.calls = 0
        self.time = 0.0
        self.grad_calls = 0
        self.unused_grad = 0
        self.pending_grad = False
        self.train_calls = 0
        self.train_inference_calls = 0
        self.batches: dict[int, int] = {}
        self.sites: dict[tuple[str, int], int] = {}
        self.autocast_calls = 0
        self.retained_sampled = 0
        self.retained_freed = 0
        self.input_dtypes: dict[str, int] = {}
        self.ref = weakref.ref(module)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.key,
            "class": self.cls,
            "params": self.params,
            "trainable": self.trainable,
            "mode_layers": self.mode_layers,
            "device": self.device,
            "dtype": self.dtype,
            "calls": self.calls,
            "time_s": self.time,
            "grad_calls": self.grad_calls,
            "unused_grad_calls": self.unused_grad + (1 if self.pending_grad else 0),
            "train_mode_calls": self.train_calls,
            "train_mode_inference_calls": self.train_inference_calls,
            "batch_sizes": {str(k): v for k, v in self.batches.items()},
            "sites": [{"file": f, "line": ln, "calls": c} for (f, ln), c in self.sites.items()],
            "autocast_calls": self.autocast_calls,
            "retained_sampled": self.retained_sampled,
            "retained_alive": self.retained_sampled - self.retained_freed,
            "input_dtypes": dict(self.input_dtypes),
        }


class _SiteStats:
    __slots__ = ("kind", "file", "line", "function", "calls", "time", "span", "elements", "steps", "first", "last")

    def __init__(self, kind: str, code: CodeType, line: int) -> None:
        self.kind = kind
        self.file = code.co_filename
        self.line = line
        self.function = code.co_name
        self.calls = 0
        self.time = 0.0
        self.span = 0.0
        self.elements = 0
        self.steps = 0
        self.first = -1.0
        self.last = -1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "calls": self.calls,
            "time_s": self.time,
            "span_s": self.span,
            "elements": self.elements,
            "steps": self.steps,
        }


class _Step:
    __slots__ = (
        "t0", "data_wait", "h2d", "forward", "backward", "optimizer", "sync", "load", "samples", "forwards",
        "backwards", "syncs", "batches", "active_sites", "alloc_sampled",
    )

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.data_wait = 0.0
        self.h2d = 0.0
        self.forward = 0.0
        self.backward = 0.0
        self.optimizer = 0.0
        self.sync = 0.0
        self.load = 0.0
        self.samples = 0
        self.forwards = 0
        self.backwards = 0
        self.syncs = 0
        self.batches = 0
        self.active_sites: list[_SiteStats] = []
        self.alloc_sampled = False


class Recorder:
    """All evidence of one process; methods are called from the patches."""

    def __init__(self, events_dir: str, role: str, argv: list[str]) -> None:
        self.events_dir = events_dir
        self.role = role
        self.pid = os.getpid()
        self.argv = argv
        self.started_wall = time.time()
        self.started = time.monotonic()
        self.clock = time.perf_counter
        # monotonic and perf_counter differ by a constant within a process: keep the offset to report monotonic times
        self.offset = time.monotonic() - time.perf_counter()
        self.errors: dict[str, dict[str, Any]] = {}
        self.torch_imported = False
        self.torch_version: str | None = None
        self.cuda = False
        self.mode: str | None = None
        self.main_module: _ModuleStats | None = None
        self.modules: dict[tuple[str, int], _ModuleStats] = {}
        self.instances: weakref.WeakKeyDictionary[Any, _ModuleStats] = weakref.WeakKeyDictionary()
        self.backward_calls = 0
        self.backward_time = 0.0
        self.optimizer_steps = 0
        self.optimizer_time = 0.0
        self.forward_calls = 0
        self.opt_t0 = 0.0
        self.sites: dict[tuple[CodeType, int, str], _SiteStats] = {}
        self.internal_code: dict[CodeType, bool] = {}
        self.library_dirs: tuple[str, ...] = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,)
        self.patch_from_pretrained: Callable[[Any], None] | None = None
        self.installed_code: dict[CodeType, bool] = {}
        self.installed_dirs: tuple[str, ...] = _installed_dirs()
        self.loads: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.load_depth = 0
        self.constructions: dict[tuple[str, int], dict[str, Any]] = {}
        self.dataloaders: dict[int, dict[str, Any]] = {}
        self.fetch = {"calls": 0, "items": 0, "time_s": 0.0}
        self.h2d: dict[str, Any] = {"copies": 0, "bytes": 0, "pageable_copies": 0, "pageable_bytes": 0,
                                    "time_s": 0.0, "non_blocking_copies": 0, "pageable_sites": {}}
        self.memory = _Memory()
        self.last_mem = -1.0
        self.peak_rss = 0
        self.peak_heap = 0
        self.first_rss = self.memory.rss()
        self.first_heap = self.memory.heap()
        self.steps_total = 0
        self.step: _Step = _Step(self.clock())
        self.step_buffer: list[dict[str, Any]] = []
        self.last_retention_sample = -1.0
        self.heap_window: list[int] = []
        self.growth_suspect = False
        self.alloc_sites: dict[tuple[str, int], list[int]] = {}
        self.alloc_mode: Any = None
        self.alloc_thread: int | None = None
        self.alloc_next = 0.0
        self.alloc_started = 0.0
        self.alloc_disabled = bool(os.environ.get(NO_ALLOC_SAMPLING_ENV))
        self.alloc_entered = False
        self.retention_live = 0
        self.pending_gpu: list[tuple[Any, Any, str]] = []
        self.discovery_handles: list[Any] = []
        self.discovery_quiet = 0
        self.max_steps = int(os.environ.get(MAX_STEPS_ENV) or 0)
        self.stop_requested = False
        self.exit_status: int | None = None
        self.exception: dict[str, Any] | None = None
        self.final = False
        self.last_worker_flush = 0.0
        self.writer: threading.Thread | None = None
        self.writer_stop = threading.Event()
        self.writer_wake = threading.Event()
        self.last_state_write = 0.0
        self.steps_path = os.path.join(events_dir, f"{self.pid}.steps.jsonl")
        self.state_path = os.path.join(events_dir, f"{self.pid}.state.json")

    # ---- call sites ------------------------------------------------------------------------------------------
    def is_internal(self, code: CodeType) -> bool:
        internal = self.internal_code.get(code)
        if internal is None:
            name = code.co_filename
            internal = name.startswith(self.library_dirs) or name.startswith("<frozen")
            self.internal_code[code] = internal
        return internal

    def is_installed(self, code: CodeType) -> bool:
        """Code of the standard library or an installed package (site-packages)."""
        installed = self.installed_code.get(code)
        if installed is None:
            installed = code.co_filename.startswith(self.installed_dirs)
            self.installed_code[code] = installed
        return installed

    def describe_exception(self, exc: BaseException) -> dict[str, Any]:
        """``type``, ``message`` and the innermost user frame (``file``, ``line``, ``function``) of an exception.

        Frames of torch, infradoctor, the standard library and installed packages are passed over while a frame
        of the user's own code exists.
        """
        frames: list[tuple[CodeType | None, int | None]] = []
        tb = exc.__traceback__
        while tb is not None:
            frames.append((tb.tb_frame.f_code, tb.tb_lineno))
            tb = tb.tb_next
        mine = [f for f in frames if f[0] is not None and not self.is_internal(f[0])]
        user = [f for f in mine if f[0] is not None and not self.is_installed(f[0])]
        code, line = (user or mine or frames or [(None, None)])[-1]
        return {
            "type": type(exc).__name__,
            "module": type(exc).__module__,
            "message": str(exc)[:2000],
            "file": code.co_filename if code is not None else None,
            "line": line,
            "function": code.co_name if code is not None else None,
        }

    def user_frame(self, frame: FrameType | None) -> FrameType | None:
        """The innermost frame of the user's own code, outside torch and infradoctor.

        Frames of the standard library and installed packages are passed over when a frame of the user's own code
        lies further out: a pipeline's internals are not where the user can change anything.
        """
        first = None
        while frame is not None:
            code = frame.f_code
            if not self.is_internal(code):
                if not self.is_installed(code):
                    return frame
                if first is None:
                    first = frame
            frame = frame.f_back
        return first

    # ---- steps -----------------------------------------------------------------------------------------------
    def boundary(self, kind: str, now: float, before: bool) -> None:
        """A step-boundary event of ``kind``; upgrades the step mode and closes the step when it is the mode."""
        if _MODE_RANK[kind] > _MODE_RANK[self.mode]:
            if self.mode is not None or before:
                self.close_step(now)
            self.mode = kind
            if before:
                return
        if kind == self.mode:
            self.close_step(now)

    def has_content(self) -> bool:
        s = self.step
        return bool(s.forwards or s.batches or s.backwards or s.syncs)

    def close_step(self, now: float) -> None:
        s = self.step
        if not self.has_content() and s.optimizer == 0.0:
            if s.data_wait == 0.0:
                s.t0 = now  # nothing happened yet: the step starts now
            # else: an epoch's end (StopIteration) waited; that time stays with the next epoch's first step
            return
        for site in s.active_sites:
            if site.first < 0 or site.last < site.first:
                # listed twice (two server threads hit the site at once) or reset by another thread's step
                continue
            site.span += site.last - site.first
            site.steps += 1
            site.first = -1.0
        record: dict[str, Any] = {
            "i": self.steps_total,
            "t0": s.t0 + self.offset,
            "t1": now + self.offset,
            "data_wait": s.data_wait,
            "h2d": s.h2d,
            "forward": s.forward,
            "backward": s.backward,
            "optimizer": s.optimizer,
            "sync": s.sync,
            "load": s.load,
            "samples": s.samples,
            "forwards": s.forwards,
            "backwards": s.backwards,
            "syncs": s.syncs,
            "batches": s.batches,
        }
        if s.alloc_sampled:
            record["alloc_sampled"] = True
        if self.pending_gpu:
            self.resolve_gpu(record)
        if now - self.last_mem >= MEMORY_READ_INTERVAL_S:
            self.last_mem = now
            rss = self.memory.rss()
            heap = self.memory.heap()
            record["rss"] = rss
            record["heap"] = heap
            if rss is not None and rss > self.peak_rss:
                self.peak_rss = rss
            if heap is not None and heap > self.peak_heap:
                self.peak_heap = heap
            if heap is not None and not self.growth_suspect:
                window = self.heap_window
                window.append(heap)
                if len(window) > GROWTH_WINDOW:
                    del window[0]
                    rising = all(b >= a for a, b in zip(window, window[1:], strict=False))
                    self.growth_suspect = rising and window[-1] - window[0] >= GROWTH_SUSPECT_BYTES
            if self.cuda_in_use():
                try:
                    import torch

                    record["cuda_alloc"] = int(torch.cuda.memory_allocated())
                except Exception as exc:  # noqa: BLE001 - never break the workload
                    _warn_once("memory.cuda", exc)
        self.step_buffer.append(record)
        if len(self.step_buffer) >= STEP_BUFFER_FLUSH:
            self.writer_wake.set()  # bounded buffer: our own records must not look like the workload's growth
        self.steps_total += 1
        self.step = _Step(now)
        if self.alloc_mode is not None or (self.growth_suspect and not self.alloc_disabled and now >= self.alloc_next):
            self.toggle_alloc_sampling(now)
        if self.max_steps and self.steps_total >= self.max_steps and not self.stop_requested:
            self.stop_requested = True
            import signal

            os.kill(os.getpid(), signal.SIGINT)

    def toggle_alloc_sampling(self, now: float) -> None:
        """Follow the allocations of one whole step (a TorchDispatchMode), then pause.

        The pause keeps the cost at most ALLOC_DUTY_CYCLE of run time; sampling starts only once memory growth is
        suspected (a healthy run never pays the dispatch mode's one-time import).
        """
        thread = threading.get_ident()
        try:
            if self.alloc_mode is not None:
                if thread != self.alloc_thread:
                    return
                mode, self.alloc_mode = self.alloc_mode, None
                mode.__exit__(None, None, None)
                spent = self.clock() - self.alloc_started
                self.alloc_next = self.clock() + spent / ALLOC_DUTY_CYCLE
                return
            if thread != threading.main_thread().ident:
                return
            if not self.alloc_entered and "torch._dynamo" in sys.modules:
                # the program compiles (torch.compile): a dispatch mode around compiled code could change what it
                # does, so the leak site comes from model outputs only
                self.alloc_disabled = True
                return
            mode = _alloc_sampler(self)
            mode.__enter__()
            self.alloc_entered = True
            _torch.zeros(1).add_(1)  # the first op in any dispatch mode imports ~800 modules once: pay it here
            self.alloc_started = self.clock()  # ... and leave that one-time cost out of the duty cycle
            self.alloc_mode = mode
            self.alloc_thread = thread
            self.step.alloc_sampled = True
        except Exception as exc:  # noqa: BLE001
            self.alloc_disabled = True
            self.alloc_mode = None
            _warn_once("memory.alloc-sites", exc)

    def resolve_gpu(self, record: dict[str, Any]) -> None:
        """Elapsed GPU time of finished CUDA event pairs; unfinished ones wait (no sync in the hot path)."""
        still: list[tuple[Any, Any, str]] = []
        gpu = 0.0
        for start, end, kind in self.pending_gpu:
            try:
                if end.query():
                    gpu += start.elapsed_time(end) / 1000.0
                else:
                    still.append((start, end, kind))
            except Exception as exc:  # noqa: BLE001
                _warn_once("cuda.events", exc)
        self.pending_gpu = still[-1000:]
        record["gpu_busy"] = gpu

    # ---- top-level forward -----------------------------------------------------------------------------------
    def module_stats(self, module: Any) -> _ModuleStats:
        """Stats shared by every instance of one model (same class and parameter count).

        A model rebuilt per request or per batch stays one entry: the records do not grow with the instances.
        """
        stats = self.instances.get(module)
        if stats is not None:
            return stats
        fresh = _ModuleStats(len(self.modules) + 1, module)
        signature = (type(module).__qualname__, fresh.params)
        stats = self.modules.get(signature)
        if stats is None:
            stats = self.modules[signature] = fresh
            main = self.main_module
            if main is None or stats.params > main.params:
                self.main_module = stats
        stats.ref = weakref.ref(module)
        with contextlib.suppress(TypeError):
            self.instances[module] = stats
        return stats

    def before_forward(self, stats: _ModuleStats, now: float) -> None:
        if stats is self.main_module:
            self.boundary("forward", now, before=True)

    def after_forward(self, stats: _ModuleStats, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                      out: Any, t0: float, t1: float, frame: FrameType | None) -> None:
        torch = _torch
        dt = t1 - t0
        self.forward_calls += 1
        stats.calls += 1
        stats.time += dt
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        if grad and stats.trainable:
            stats.grad_calls += 1
            if stats.pending_grad:
                stats.unused_grad += 1
            stats.pending_grad = True
        if module.training:
            stats.train_calls += 1
            if not grad:
                stats.train_inference_calls += 1
        if torch.is_autocast_enabled(stats.device):
            stats.autocast_calls += 1
        batch = _batch_size(args[0] if args else next(iter(kwargs.values()), None))
        stats.batches[batch] = stats.batches.get(batch, 0) + 1
        if stats.calls <= SITE_RESOLVE_CALLS:
            first = _first_tensor(args[0] if args else next(iter(kwargs.values()), None))
            if first is not None:
                dtype = str(first.dtype).replace("torch.", "")
                stats.input_dtypes[dtype] = stats.input_dtypes.get(dtype, 0) + 1
        if stats.calls <= SITE_RESOLVE_CALLS and frame is not None:
            user = self.user_frame(frame)
            if user is not None:
                site = (user.f_code.co_filename, user.f_lineno)
                stats.sites[site] = stats.sites.get(site, 0) + 1
        step = self.step
        step.forward += dt
        step.forwards += 1
        if stats is self.main_module and not step.batches:
            step.samples += batch
        if t0 - self.last_retention_sample >= RETENTION_SAMPLE_INTERVAL_S and self.retention_live < RETENTION_MAX_LIVE:
            self.last_retention_sample = t0
            tensor = _first_tensor(out)
            if tensor is not None:
                stats.retained_sampled += 1
                self.retention_live += 1
                weakref.finalize(tensor, _freed, stats).atexit = False

    def wrap_forward(self, module: Any) -> None:
        """Time the module's top-level calls: an instance attribute ``forward`` that wraps the real one.

        The wrapper holds the module weakly (the module's own ``__dict__`` holds the wrapper): a strong reference
        would make every instance a reference cycle, so a model built per request would wait for the cyclic
        garbage collector instead of being freed at once, and the run's memory would grow because of us.
        """
        forward = module.forward
        if getattr(forward, "__infradoctor__", False):
            return
        stats = self.module_stats(module)
        rec = self
        clock = self.clock
        func = getattr(forward, "__func__", None)
        if func is not None and getattr(forward, "__self__", None) is module:
            target: Callable[[], Any] = weakref.ref(module)

            def call(*args: Any, **kwargs: Any) -> Any:
                return func(target(), *args, **kwargs)
        else:  # an instance-level forward set by the program: keep it as it is
            call = forward

            def target() -> Any:
                return module

        def timed_forward(*args: Any, **kwargs: Any) -> Any:
            if getattr(_local, "top", False):
                return call(*args, **kwargs)
            t0 = clock()
            try:
                rec.before_forward(stats, t0)
            except Exception as exc:  # noqa: BLE001
                _warn_once("forward.before", exc)
            events = None
            if stats.device == "cuda":
                events = _cuda_event_pair()
            _local.top = True
            try:
                out = call(*args, **kwargs)
            finally:
                _local.top = False
            t1 = clock()
            try:
                if events is not None:
                    events[1].record()
                    rec.pending_gpu.append((events[0], events[1], "forward"))
                rec.after_forward(stats, target(), args, kwargs, out, t0, t1, sys._getframe(1))
            except Exception as exc:  # noqa: BLE001
                _warn_once("forward.after", exc)
            return out

        timed_forward.__infradoctor__ = True  # type: ignore[attr-defined]
        # what inspect.signature(model.forward) shows (argument checks in pipelines); holds no module reference
        with contextlib.suppress(TypeError, ValueError):
            timed_forward.__signature__ = inspect.signature(forward)  # type: ignore[attr-defined]
        module.__dict__["forward"] = timed_forward

    # ---- discovery hooks -------------------------------------------------------------------------------------
    def arm_discovery(self) -> None:
        if self.discovery_handles:
            return
        from torch.nn.modules import module as module_mod

        self.discovery_quiet = 0
        self.discovery_handles = [
            module_mod.register_module_forward_pre_hook(self.discovery_pre),
            module_mod.register_module_forward_hook(self.discovery_post, always_call=True),
        ]

    def disarm_discovery(self) -> None:
        handles, self.discovery_handles = self.discovery_handles, []
        for handle in handles:
            handle.remove()

    def discovery_pre(self, module: Any, args: Any) -> None:
        depth = getattr(_local, "depth", 0)
        _local.depth = depth + 1
        if depth or getattr(_local, "top", False):
            return
        try:
            forward = module.__dict__.get("forward")
            if forward is not None and getattr(forward, "__infradoctor__", False):
                self.discovery_quiet += 1
                if self.discovery_quiet >= DISCOVERY_QUIET_CALLS:
                    self.disarm_discovery()
                return
            self.discovery_quiet = 0
            self.wrap_forward(module)
            stats = self.module_stats(module)
            now = self.clock()
            self.before_forward(stats, now)
            _local.discovering = (module, stats, now, args)
        except Exception as exc:  # noqa: BLE001
            _warn_once("forward.discovery", exc)

    def discovery_post(self, module: Any, args: Any, out: Any) -> None:
        _local.depth = max(0, getattr(_local, "depth", 1) - 1)
        pending = getattr(_local, "discovering", None)
        if pending is None or pending[0] is not module or _local.depth:
            return
        _local.discovering = None
        try:
            _, stats, t0, call_args = pending
            self.after_forward(stats, module, tuple(call_args or ()), {}, out, t0, self.clock(), sys._getframe(1))
        except Exception as exc:  # noqa: BLE001
            _warn_once("forward.discovery", exc)

    # ---- evidence files --------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        now = time.monotonic()
        constructions = []
        for (file, line), entry in list(self.constructions.items()):
            ref = entry.get("ref")
            top = ref() if ref is not None else None
            if top is not None:
                with contextlib.suppress(Exception):
                    entry["params"] = sum(int(p.numel()) for p in top.parameters())
            constructions.append({
                "file": file, "line": line, "count": entry["count"], "class": entry["class"],
                "params": entry["params"], "time_s": entry["time_s"] + entry["last"] - entry["start"],
            })
        return {
            "pid": self.pid,
            "role": self.role,
            "argv": self.argv,
            "started_wall": self.started_wall,
            "started": self.started,
            "updated": now,
            "final": self.final,
            "exit_status": self.exit_status,
            "torch_imported": self.torch_imported,
            "torch_version": self.torch_version,
            "cuda": self.cuda,
            "mode": self.mode,
            "steps": self.steps_total,
            "main_module": self.main_module.key if self.main_module else None,
            "modules": [m.to_json() for m in list(self.modules.values())],
            "backward_calls": self.backward_calls,
            "backward_time_s": self.backward_time,
            "optimizer_steps": self.optimizer_steps,
            "optimizer_time_s": self.optimizer_time,
            "syncs": [s.to_json() for s in list(self.sites.values())],
            "loads": [dict(v) for v in list(self.loads.values())],
            "constructions": constructions,
            "dataloaders": [dict(v) for v in list(self.dataloaders.values())],
            "fetch": dict(self.fetch),
            "h2d": {**self.h2d, "pageable_sites": dict(self.h2d["pageable_sites"])},
            "memory": {
                "first_rss": self.first_rss,
                "first_heap": self.first_heap,
                "peak_rss": self.peak_rss,
                "peak_heap": self.peak_heap,
                "rss": self.memory.rss(),
                "heap": self.memory.heap(),
                "cuda_peak": self.cuda_peak(),
            },
            "precision": self.precision(),
            "alloc_sites": [
                {"file": f, "line": ln, "sampled": v[0], "sampled_bytes": v[1], "alive": v[2], "alive_bytes": v[3]}
                for (f, ln), v in list(self.alloc_sites.items())
            ],
            "errors": list(self.errors.values()),
            "exception": self.exception,
        }

    def cuda_in_use(self) -> bool:
        """CUDA is available and the workload has initialised it (we never create a CUDA context ourselves)."""
        if not self.cuda or _torch is None:
            return False
        try:
            return bool(_torch.cuda.is_initialized())
        except Exception:  # noqa: BLE001
            return False

    def cuda_peak(self) -> int | None:
        if not self.cuda_in_use():
            return None
        try:
            import torch

            return int(torch.cuda.max_memory_allocated())
        except Exception:  # noqa: BLE001
            return None

    def precision(self) -> dict[str, Any]:
        if not self.torch_imported:
            return {}
        try:
            import torch

            out: dict[str, Any] = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
            if self.cuda_in_use():
                out["allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
                out["bf16_supported"] = bool(torch.cuda.is_bf16_supported())
                out["capability"] = list(torch.cuda.get_device_capability())
                out["device_name"] = torch.cuda.get_device_name()
            return out
        except Exception as exc:  # noqa: BLE001
            _warn_once("precision", exc)
            return {}

    def flush(self, steps_only: bool = False) -> None:
        """Append buffered steps and (unless ``steps_only``) replace the state file (atomic rename)."""
        with _state_lock:
            buffer, self.step_buffer = self.step_buffer, []
            try:
                if buffer:
                    with open(self.steps_path, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(buffer, separators=(",", ":")) + "\n")
                if steps_only:
                    return
                self.last_state_write = time.monotonic()
                state = self.snapshot()
                tmp = f"{self.state_path}.tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump(state, fh, separators=(",", ":"))
                os.replace(tmp, self.state_path)
            except RuntimeError:
                pass  # a dict changed while the writer thread read it: the next flush catches up
            except Exception as exc:  # noqa: BLE001
                _warn_once("evidence.write", exc)

    def start_writer(self) -> None:
        def loop() -> None:
            while not self.writer_stop.is_set():
                self.writer_wake.wait(FLUSH_INTERVAL_S)
                self.writer_wake.clear()
                if self.writer_stop.is_set() or os.getpid() != self.pid:
                    return
                self.flush(steps_only=time.monotonic() - self.last_state_write < FLUSH_INTERVAL_S)

        self.writer = threading.Thread(target=loop, name="infradoctor-profile-writer", daemon=True)
        self.writer.start()

    def finish(self, exit_status: int | None = None) -> None:
        """Close the last (partial) step and write everything; safe to call twice."""
        if self.final or os.getpid() != self.pid:
            return
        self.exit_status = exit_status
        if self.alloc_mode is not None and threading.get_ident() == self.alloc_thread:
            with contextlib.suppress(Exception):
                self.alloc_mode.__exit__(None, None, None)
            self.alloc_mode = None
        try:
            s = self.step
            if self.has_content():
                now = self.clock()
                self.close_step(now)
                if self.step_buffer:
                    self.step_buffer[-1]["partial"] = True
            del s
        except Exception as exc:  # noqa: BLE001
            _warn_once("finish", exc)
        self.final = True
        self.writer_stop.set()
        self.writer_wake.set()
        self.flush()


def _alloc_sampler(rec: Recorder) -> Any:
    """A dispatch mode that notes the user line of each large op output and whether it is ever freed."""
    from torch.utils._python_dispatch import TorchDispatchMode

    tensor_cls = _torch.Tensor

    def freed(entry: list[int], nbytes: int) -> None:
        entry[2] -= 1
        entry[3] -= nbytes

    class AllocationSites(TorchDispatchMode):  # type: ignore[misc,no-untyped-call]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            try:
                first = out[0] if isinstance(out, (tuple, list)) and out else out
                if isinstance(first, tensor_cls) and not first._is_view():
                    nbytes = int(first.untyped_storage().nbytes())
                    if nbytes >= ALLOC_MIN_BYTES:
                        frame = rec.user_frame(sys._getframe(1))
                        if frame is not None:
                            key = (frame.f_code.co_filename, frame.f_lineno)
                            entry = rec.alloc_sites.get(key)
                            if entry is None:
                                entry = rec.alloc_sites[key] = [0, 0, 0, 0]
                            entry[0] += 1
                            entry[1] += nbytes
                            entry[2] += 1
                            entry[3] += nbytes
                            weakref.finalize(first, freed, entry, nbytes).atexit = False
            except Exception as exc:  # noqa: BLE001
                _warn_once("memory.alloc-sites", exc)
            return out

    return AllocationSites()  # type: ignore[no-untyped-call]


def _installed_dirs() -> tuple[str, ...]:
    import sysconfig

    dirs = set()
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError, ValueError):
            dirs.add(os.path.abspath(sysconfig.get_path(name)) + os.sep)
    import site

    with contextlib.suppress(AttributeError):
        dirs.update(os.path.abspath(p) + os.sep for p in site.getsitepackages())
    return tuple(sorted(dirs))


def _freed(stats: _ModuleStats) -> None:
    stats.retained_freed += 1
    rec = _recorder
    if rec is not None:
        rec.retention_live -= 1


def _batch_size(value: Any) -> int:
    """Leading dimension of the first tensor in a call's first argument; 1 for a single unbatched vector."""
    tensor_cls = _torch.Tensor
    for _ in range(3):
        if isinstance(value, tensor_cls):
            return int(value.shape[0]) if value.dim() >= 2 else 1
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        elif isinstance(value, dict) and value:
            value = next(iter(value.values()))
        else:
            break
    return 1


def _first_tensor(value: Any) -> Any:
    tensor_cls = _torch.Tensor
    for _ in range(3):
        if isinstance(value, tensor_cls):
            return value
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        elif isinstance(value, dict) and value:
            value = next(iter(value.values()))
        else:
            return None
    return None


def _cuda_event_pair() -> tuple[Any, Any] | None:
    try:
        import torch

        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        return start, end
    except Exception as exc:  # noqa: BLE001
        _warn_once("cuda.events", exc)
        return None


# ---- patches ---------------------------------------------------------------------------------------------------

SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__iter__", "__repr__",
                "__format__")
"""Tensor methods that read a tensor's values on the host (a device sync on GPU)."""


def _patch_sync_methods(rec: Recorder, torch: Any) -> None:
    clock = rec.clock
    sites = rec.sites

    def make(kind: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            code = frame.f_code
            internal = rec.internal_code.get(code)
            if internal is None:
                internal = rec.is_internal(code)
            if internal:
                return orig(self, *args, **kwargs)
            t0 = clock()
            out = orig(self, *args, **kwargs)
            t1 = clock()
            try:
                key = (code, frame.f_lineno, kind)
                site = sites.get(key)
                if site is None:
                    site = sites[key] = _SiteStats(kind, code, frame.f_lineno)
                site.calls += 1
                dt = t1 - t0
                site.time += dt
                if kind == "iter":
                    site.elements += int(self.shape[0]) if self.dim() else 0
                if site.first < 0:
                    site.first = t0
                    rec.step.active_sites.append(site)
                site.last = t1
                step = rec.step
                step.syncs += 1
                if not getattr(_local, "top", False):
                    step.sync += dt
            except Exception as exc:  # noqa: BLE001
                _warn_once("tensor.sync", exc)
            return out

        return wrapper

    for name in SYNC_METHODS:
        orig = getattr(torch.Tensor, name, None)
        if orig is not None:
            setattr(torch.Tensor, name, make(name.strip("_"), orig))


def _patch_autograd(rec: Recorder, torch: Any) -> None:
    clock = rec.clock

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if getattr(_local, "in_backward", False):
                return orig(*args, **kwargs)
            t0 = clock()
            events = _cuda_event_pair() if rec.cuda_in_use() else None
            _local.in_backward = True
            try:
                return orig(*args, **kwargs)
            finally:
                _local.in_backward = False
                try:
                    dt = clock() - t0
                    rec.backward_calls += 1
                    rec.backward_time += dt
                    rec.step.backward += dt
                    rec.step.backwards += 1
                    for stats in rec.modules.values():
                        stats.pending_grad = False
                    if events is not None:
                        events[1].record()
                        rec.pending_gpu.append((events[0], events[1], "backward"))
                except Exception as exc:  # noqa: BLE001
                    _warn_once("autograd", exc)

        return wrapper

    torch.autograd.backward = make(torch.autograd.backward)
    torch.autograd.grad = make(torch.autograd.grad)


def _patch_optimizer(rec: Recorder, torch: Any) -> None:
    from torch.optim import optimizer as optim_mod

    def pre(optimizer: Any, args: Any, kwargs: Any) -> None:
        rec.opt_t0 = rec.clock()

    def post(optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            now = rec.clock()
            dt = now - rec.opt_t0 if rec.opt_t0 else 0.0
            rec.opt_t0 = 0.0
            rec.optimizer_steps += 1
            rec.optimizer_time += dt
            rec.step.optimizer += dt
            rec.boundary("optimizer", now, before=False)
        except Exception as exc:  # noqa: BLE001
            _warn_once("optimizer", exc)

    optim_mod.register_optimizer_step_pre_hook(pre)
    optim_mod.register_optimizer_step_post_hook(post)


def _loader_config(loader: Any) -> dict[str, Any]:
    def get(name: str) -> Any:
        value = getattr(loader, name, None)
        return value if isinstance(value, (int, float, bool, str)) or value is None else str(value)

    dataset = getattr(loader, "dataset", None)
    length: int | None = None
    with contextlib.suppress(Exception):
        length = len(dataset)  # type: ignore[arg-type]
    return {
        "num_workers": get("num_workers"),
        "pin_memory": get("pin_memory"),
        "persistent_workers": get("persistent_workers"),
        "prefetch_factor": get("prefetch_factor"),
        "batch_size": get("batch_size"),
        "dataset": type(dataset).__name__,
        "dataset_len": length,
        "multiprocessing_context": str(getattr(loader, "multiprocessing_context", None) or "") or None,
    }


def _patch_dataloader(rec: Recorder, torch: Any) -> None:
    from torch.utils.data import dataloader as dl_mod

    clock = rec.clock
    loader_init = dl_mod.DataLoader.__init__

    @functools.wraps(loader_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        loader_init(self, *args, **kwargs)
        try:
            frame = rec.user_frame(sys._getframe(1))
            entry = _loader_config(self)
            entry.update(
                id=id(self),
                file=frame.f_code.co_filename if frame else None,
                line=frame.f_lineno if frame else None,
                iterators=0,
                batches=0,
                wait_s=0.0,
                first_batch_waits=[],
            )
            rec.dataloaders[id(self)] = entry
        except Exception as exc:  # noqa: BLE001
            _warn_once("dataloader.init", exc)

    dl_mod.DataLoader.__init__ = init  # type: ignore[method-assign]

    loader_iter = dl_mod.DataLoader.__iter__

    @functools.wraps(loader_iter)
    def iterate(self: Any) -> Any:
        it = loader_iter(self)
        try:
            entry = rec.dataloaders.get(id(self))
            if entry is None:
                entry = _loader_config(self) | {"id": id(self), "file": None, "line": None, "iterators": 0,
                                                "batches": 0, "wait_s": 0.0, "first_batch_waits": []}
                rec.dataloaders[id(self)] = entry
            entry["iterators"] += 1
            it._infradoctor_entry = entry  # type: ignore[attr-defined]
            it._infradoctor_first = True  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001
            _warn_once("dataloader.iter", exc)
        return it

    dl_mod.DataLoader.__iter__ = iterate  # type: ignore[method-assign]

    next_orig = dl_mod._BaseDataLoaderIter.__next__

    @functools.wraps(next_orig)
    def next_batch(self: Any) -> Any:
        t0 = clock()
        try:
            rec.boundary("dataloader", t0, before=True)
        except Exception as exc:  # noqa: BLE001
            _warn_once("dataloader.next", exc)
        try:
            out = next_orig(self)
        except StopIteration:
            rec.step.data_wait += clock() - t0
            raise
        dt = clock() - t0
        try:
            step = rec.step
            step.data_wait += dt
            step.batches += 1
            step.samples += _batch_size(out) if not isinstance(out, torch.Tensor) or out.dim() else 1
            entry = getattr(self, "_infradoctor_entry", None)
            if entry is not None:
                entry["batches"] += 1
                entry["wait_s"] += dt
                if getattr(self, "_infradoctor_first", False):
                    self._infradoctor_first = False
                    if len(entry["first_batch_waits"]) < 100:
                        entry["first_batch_waits"].append(dt)
        except Exception as exc:  # noqa: BLE001
            _warn_once("dataloader.next", exc)
        return out

    dl_mod._BaseDataLoaderIter.__next__ = next_batch  # type: ignore[method-assign]
    _patch_fetchers(rec)


def _patch_fetchers(rec: Recorder | None) -> None:
    """Time dataset fetches (items + collate) in this process and, after fork or spawn, in worker processes."""
    from torch.utils.data._utils import fetch as fetch_mod
    from torch.utils.data._utils import worker as worker_mod

    for cls in (fetch_mod._MapDatasetFetcher, fetch_mod._IterableDatasetFetcher):
        orig = cls.fetch
        if getattr(orig, "__infradoctor__", False):
            continue

        def make(orig: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(orig)
            def fetch(self: Any, possibly_batched_index: Any) -> Any:
                t0 = time.perf_counter()
                out = orig(self, possibly_batched_index)
                try:
                    _record_fetch(time.perf_counter() - t0, possibly_batched_index)
                except Exception as exc:  # noqa: BLE001
                    _warn_once("dataloader.fetch", exc)
                return out

            fetch.__infradoctor__ = True  # type: ignore[attr-defined]
            return fetch

        cls.fetch = make(orig)  # type: ignore[method-assign]

    loop = worker_mod._worker_loop
    if not getattr(loop, "__infradoctor__", False):

        @functools.wraps(loop)
        def worker_loop(*args: Any, **kwargs: Any) -> Any:
            try:
                return loop(*args, **kwargs)
            finally:
                _write_worker(force=True)

        worker_loop.__infradoctor__ = True  # type: ignore[attr-defined]
        worker_mod._worker_loop = worker_loop


_worker_stats: dict[str, Any] = {"pid": None, "calls": 0, "items": 0, "time_s": 0.0, "last_write": 0.0}


def _record_fetch(dt: float, index: Any) -> None:
    items = len(index) if isinstance(index, (list, tuple)) else 1
    rec = _recorder
    if rec is not None and rec.pid == os.getpid():
        rec.fetch["calls"] += 1
        rec.fetch["items"] += items
        rec.fetch["time_s"] += dt
        return
    stats = _worker_stats
    if stats["pid"] != os.getpid():
        stats.update(pid=os.getpid(), calls=0, items=0, time_s=0.0, last_write=time.monotonic())
    stats["calls"] += 1
    stats["items"] += items
    stats["time_s"] += dt
    _write_worker(force=False)


def _write_worker(force: bool) -> None:
    stats = _worker_stats
    events_dir = os.environ.get(EVENTS_DIR_ENV)
    if not events_dir or stats["pid"] != os.getpid():
        return
    now = time.monotonic()
    if not force and now - stats["last_write"] < WORKER_FLUSH_INTERVAL_S:
        return
    stats["last_write"] = now
    path = os.path.join(events_dir, f"{os.getpid()}.worker.json")
    with contextlib.suppress(OSError):
        with open(path + ".tmp", "w", encoding="utf-8") as fh:
            json.dump({"pid": os.getpid(), "ppid": os.getppid(), "calls": stats["calls"], "items": stats["items"],
                       "time_s": stats["time_s"]}, fh)
        os.replace(path + ".tmp", path)


def _patch_loads(rec: Recorder, torch: Any) -> None:
    def make(kind: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if rec.load_depth:
                return orig(*args, **kwargs)
            t0 = rec.clock()
            rec.load_depth += 1
            try:
                return orig(*args, **kwargs)
            finally:
                rec.load_depth -= 1
                try:
                    dt = rec.clock() - t0
                    frame = rec.user_frame(sys._getframe(1))
                    file = frame.f_code.co_filename if frame else "?"
                    line = frame.f_lineno if frame else 0
                    entry = rec.loads.setdefault(
                        (kind, file, line), {"kind": kind, "file": file, "line": line, "calls": 0, "time_s": 0.0}
                    )
                    entry["calls"] += 1
                    entry["time_s"] += dt
                    rec.step.load += dt
                except Exception as exc:  # noqa: BLE001
                    _warn_once("load", exc)

        return wrapper

    load = make("torch.load", torch.load)
    torch.load = load
    torch.serialization.load = load
    torch.nn.Module.load_state_dict = make("load_state_dict", torch.nn.Module.load_state_dict)
    rec.patch_from_pretrained = lambda cls: _patch_classmethod(cls, "from_pretrained", make)


def _patch_classmethod(cls: Any, name: str, make: Callable[[str, Callable[..., Any]], Callable[..., Any]]) -> None:
    bound = getattr(cls, name, None)
    if bound is None or getattr(bound, "__infradoctor__", False):
        return
    func = bound.__func__
    wrapped = make(f"{cls.__name__}.{name}", func)
    wrapped.__infradoctor__ = True  # type: ignore[attr-defined]
    setattr(cls, name, classmethod(wrapped))


def _patch_module_construction(rec: Recorder, torch: Any) -> None:
    module_cls = torch.nn.Module
    init = module_cls.__init__

    @functools.wraps(init)
    def module_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            if not rec.discovery_handles:
                rec.arm_discovery()
            frame: FrameType | None = sys._getframe(1)
            top = self
            while frame is not None:
                code = frame.f_code
                if code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), module_cls):
                    top = frame.f_locals["self"]
                elif not rec.is_internal(code):
                    break
                frame = frame.f_back
            if frame is None:
                return
            key = (frame.f_code.co_filename, frame.f_lineno)
            entry = rec.constructions.get(key)
            now = rec.clock()
            if entry is None:
                entry = rec.constructions[key] = {"count": 0, "class": type(top).__name__, "marker": None,
                                                  "params": None, "ref": None, "time_s": 0.0, "start": now,
                                                  "last": now}
            # modules built at one line count once until the program calls a model: `Sequential(Linear(), ...)`
            # is one construction; the same line again after forward calls (a loop, a handler) is another.
            # Its time: from the first to the last submodule's construction (the last one's own init excluded)
            if entry["marker"] != rec.forward_calls:
                entry["marker"] = rec.forward_calls
                entry["count"] += 1
                entry["time_s"] += entry["last"] - entry["start"]
                entry["start"] = now
            entry["last"] = now
            entry["class"] = type(top).__name__
            entry["ref"] = weakref.ref(top)
        except Exception as exc:  # noqa: BLE001
            _warn_once("module.init", exc)

    module_cls.__init__ = module_init

    getstate = module_cls.__getstate__

    @functools.wraps(getstate)
    def module_getstate(self: Any) -> Any:
        state = getstate(self)
        forward = state.get("forward") if isinstance(state, dict) else None
        if forward is not None and getattr(forward, "__infradoctor__", False):
            state = dict(state)
            del state["forward"]
        return state

    module_cls.__getstate__ = module_getstate


def _patch_h2d(rec: Recorder, torch: Any) -> None:
    """GPU only: count host-to-device copies and whether their source was pinned."""
    clock = rec.clock

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.device.type != "cpu" or rec.is_internal(sys._getframe(1).f_code):
                return orig(self, *args, **kwargs)
            t0 = clock()
            out = orig(self, *args, **kwargs)
            try:
                if out is not self and getattr(out, "device", None) is not None and out.device.type == "cuda":
                    dt = clock() - t0
                    nbytes = int(self.numel() * self.element_size())
                    h2d = rec.h2d
                    h2d["copies"] += 1
                    h2d["bytes"] += nbytes
                    h2d["time_s"] += dt
                    if not self.is_pinned():
                        h2d["pageable_copies"] += 1
                        h2d["pageable_bytes"] += nbytes
                        frame = sys._getframe(1)
                        if frame is not None:
                            key = f"{frame.f_code.co_filename}:{frame.f_lineno}"
                            sites = h2d["pageable_sites"]
                            if key in sites or len(sites) < 20:
                                sites[key] = sites.get(key, 0) + 1
                    if kwargs.get("non_blocking"):
                        h2d["non_blocking_copies"] += 1
                    rec.step.h2d += dt
            except Exception as exc:  # noqa: BLE001
                _warn_once("h2d", exc)
            return out

        return wrapper

    torch.Tensor.to = make(torch.Tensor.to)
    torch.Tensor.cuda = make(torch.Tensor.cuda)


def on_torch_imported(torch: Any) -> None:
    """Install every torch patch into this process (idempotent)."""
    global _torch
    _torch = torch
    rec = _recorder
    if rec is None or rec.torch_imported:
        return
    rec.torch_imported = True
    rec.torch_version = str(getattr(torch, "__version__", "?"))
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    rec.library_dirs = (*rec.library_dirs, torch_dir + os.sep)
    rec.internal_code.clear()
    try:
        rec.cuda = bool(torch.cuda.is_available())
    except Exception as exc:  # noqa: BLE001
        _warn_once("cuda", exc)
    for name, patch in (
        ("tensor.sync", _patch_sync_methods),
        ("autograd", _patch_autograd),
        ("optimizer", _patch_optimizer),
        ("dataloader", _patch_dataloader),
        ("load", _patch_loads),
        ("module.init", _patch_module_construction),
    ):
        try:
            patch(rec, torch)
        except Exception as exc:  # noqa: BLE001
            _warn_once(f"install.{name}", exc)
    if rec.cuda:
        try:
            _patch_h2d(rec, torch)
        except Exception as exc:  # noqa: BLE001
            _warn_once("install.h2d", exc)
    try:
        rec.arm_discovery()
    except Exception as exc:  # noqa: BLE001
        _warn_once("install.discovery", exc)
    transformers = sys.modules.get("transformers.modeling_utils")
    if transformers is not None:
        on_transformers_imported(transformers)


def on_transformers_imported(module: Any) -> None:
    rec = _recorder
    patch = getattr(rec, "patch_from_pretrained", None)
    cls = getattr(module, "PreTrainedModel", None)
    if patch is not None and cls is not None:
        try:
            patch(cls)
        except Exception as exc:  # noqa: BLE001
            _warn_once("install.from_pretrained", exc)


class _ImportHook:
    """Meta-path finder that runs a callback right after a named module is executed."""

    def __init__(self, callbacks: dict[str, Callable[[Any], None]]) -> None:
        self.callbacks = dict(callbacks)
        self.busy: set[str] = set()

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        callback = self.callbacks.get(name)
        if callback is None or name in self.busy:
            return None
        import importlib.util

        self.busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy.discard(name)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return None
        exec_module = loader.exec_module
        hook = self

        def exec_and_instrument(module: Any) -> None:
            exec_module(module)
            hook.callbacks.pop(name, None)
            try:
                callback(module)
            except Exception as exc:  # noqa: BLE001
                _warn_once(f"import-hook.{name}", exc)

        loader.exec_module = exec_and_instrument
        return spec


def activate(events_dir: str, role: str = "main", argv: list[str] | None = None) -> Recorder:
    """Start recording in this process: torch patches now if torch is loaded, else when it is imported."""
    global _recorder
    rec = Recorder(events_dir, role, list(argv if argv is not None else sys.argv))
    _recorder = rec
    callbacks: dict[str, Callable[[Any], None]] = {"transformers.modeling_utils": on_transformers_imported}
    if "torch" in sys.modules:
        on_torch_imported(sys.modules["torch"])
    else:
        callbacks["torch"] = on_torch_imported
    sys.meta_path.insert(0, _ImportHook(callbacks))  # type: ignore[arg-type]
    rec.flush()
    rec.start_writer()
    atexit.register(rec.finish)
    _flush_on_sigterm(rec)
    return rec


def _flush_on_sigterm(rec: Recorder) -> None:
    """With the default SIGTERM disposition, write the evidence first and then die of SIGTERM as before."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_sigterm(signum: int, frame: Any) -> None:
        with contextlib.suppress(Exception):
            rec.finish(128 + signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGTERM, on_sigterm)


def activate_worker_support() -> None:
    """In a process that is not the profiled main process (e.g. a spawned DataLoader worker): time dataset fetches."""

    def install(torch: Any) -> None:
        _patch_fetchers(None)

    if "torch" in sys.modules:
        install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _ImportHook({"torch": install}))  # type: ignore[arg-type]


def recorder() -> Recorder | None:
    """The active recorder of this process, if any."""
    return _recorder
