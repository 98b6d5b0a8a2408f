"""The recorder: all evidence of one profiled process, kept in memory and written to the events folder.

Its methods are called from the patches (``patches/``); it never breaks the workload: every failure inside is
noted once (``state.warn_once``) and ignored.
"""

from __future__ import annotations

import contextlib
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

from infradoctor.profile.instrument import state
from infradoctor.profile.instrument.records import (
    MEASURE_KEPT_FROM,
    CallSiteStats,
    Graph,
    Memory,
    ModuleStats,
    Step,
    SyncSiteStats,
    batch_size,
    first_tensor,
    sequence_length,
    shallow_tensors,
)

MAX_STEPS_ENV = "INFRADOCTOR_PROFILE_MAX_STEPS"
"""When set, the workload is interrupted (SIGINT) after this many steps."""
NO_ALLOC_SAMPLING_ENV = "INFRADOCTOR_PROFILE_NO_ALLOC_SAMPLING"
"""Set for servers under load: the dispatch mode's one-time import (~1-2 s) would stall a request being timed."""

DISCOVERY_QUIET_CALLS = 50
"""Top-level calls without a new top-level module after which the global discovery hooks are dropped (they are
armed again whenever a Module is built, unpickled or deep-copied, or weights are loaded)."""
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
ALLOC_DUTY_CYCLE = 0.02
"""Share of run time that allocation-site sampling (a TorchDispatchMode over one step) may take."""
GROWTH_WINDOW = 5
"""Memory readings that must rise (by GROWTH_SUSPECT_BYTES, all but one of their steps up) before allocation sites
are sampled: a leak rises reading after reading; a one-time allocation (an optimizer's state on its first step)
jumps once and stays flat, and must not pay the sampler's one-time import of ~800 modules (1-2 s of CPU)."""
GROWTH_AFTER_STEPS = 10
"""Steps before growth is suspected at all (warm-up allocates)."""
GROWTH_SUSPECT_BYTES = 2 * 1024 * 1024
"""Rise over the window that makes growth suspect."""
GRAPH_KEY = "_infradoctor_graph"
"""Key of our marker in an autograd node's ``metadata``."""
GRAPH_OUTPUTS = 3
"""Output tensors of one call whose autograd nodes are followed (the graph is used if a backward reaches any)."""

_MODE_RANK = {None: 0, "forward": 1, "dataloader": 2, "optimizer": 3}


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
        self.main_module: ModuleStats | None = None
        self.modules: dict[tuple[str, int], ModuleStats] = {}
        self.instances: weakref.WeakKeyDictionary[Any, ModuleStats] = weakref.WeakKeyDictionary()
        self.backward_calls = 0
        self.backward_time = 0.0
        self.optimizer_steps = 0
        self.optimizer_time = 0.0
        self.forward_calls = 0
        self.opt_t0 = 0.0
        self.sites: dict[tuple[CodeType, int, str], SyncSiteStats] = {}
        self.internal_code: dict[CodeType, bool] = {}
        self.library_dirs: tuple[str, ...] = (
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep,
        )
        self.patch_from_pretrained: Callable[[Any], None] | None = None
        self.installed_code: dict[CodeType, bool] = {}
        self.installed_dirs: tuple[str, ...] = installed_dirs()
        self.loads: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.load_depth = 0
        self.constructions: dict[tuple[str, int], dict[str, Any]] = {}
        self.dataloaders: dict[int, dict[str, Any]] = {}
        self.fetch = {"calls": 0, "items": 0, "time_s": 0.0, "cpu_s": 0.0}
        self.data_modules: dict[str, int] = {}
        """Modules called inside dataset fetches (transforms) by class: data loading, not models."""
        self.h2d: dict[str, Any] = {"copies": 0, "bytes": 0, "pageable_copies": 0, "pageable_bytes": 0,
                                    "time_s": 0.0, "non_blocking_copies": 0, "pageable_sites": {}}
        self.memory = Memory()
        self.last_mem = -1.0
        self.peak_rss = 0
        self.peak_heap = 0
        self.first_rss = self.memory.rss()
        self.first_heap = self.memory.heap()
        self.last_heap = self.first_heap
        self.steps_total = 0
        self.step = Step(-1.0)  # starts at the program's first step-related activity, not at start-up
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
        if self.step.t0 < 0:
            self.step.t0 = now
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
        if s.t0 < 0:
            s.t0 = now
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
            self.read_memory(now, record)
        self.step_buffer.append(record)
        if len(self.step_buffer) >= STEP_BUFFER_FLUSH:
            self.writer_wake.set()  # bounded buffer: our own records must not look like the workload's growth
        self.steps_total += 1
        self.step = Step(now)
        if self.alloc_mode is not None or (self.growth_suspect and not self.alloc_disabled and now >= self.alloc_next):
            self.toggle_alloc_sampling(now)
        if self.max_steps and self.steps_total >= self.max_steps and not self.stop_requested:
            self.stop_requested = True
            import signal

            os.kill(os.getpid(), signal.SIGINT)

    def read_memory(self, now: float, record: dict[str, Any]) -> None:
        self.last_mem = now
        rss = self.memory.rss()
        heap = self.memory.heap()
        record["rss"] = rss
        record["heap"] = heap
        if heap is not None:
            self.last_heap = heap
        if rss is not None and rss > self.peak_rss:
            self.peak_rss = rss
        if heap is not None and heap > self.peak_heap:
            self.peak_heap = heap
        if heap is not None and not self.growth_suspect:
            window = self.heap_window
            window.append(heap)
            if len(window) > GROWTH_WINDOW:
                del window[0]
                rises = sum(1 for a, b in zip(window, window[1:], strict=False) if b > a)
                falls = any(b < a for a, b in zip(window, window[1:], strict=False))
                self.growth_suspect = (self.steps_total >= GROWTH_AFTER_STEPS and not falls
                                       and rises >= len(window) - 2
                                       and window[-1] - window[0] >= GROWTH_SUSPECT_BYTES)
        if self.cuda_in_use():
            try:
                record["cuda_alloc"] = int(state.torch.cuda.memory_allocated())
            except Exception as exc:  # noqa: BLE001 - never break the workload
                state.warn_once("memory.cuda", exc)

    def toggle_alloc_sampling(self, now: float) -> None:
        """Follow the allocations of one whole step (a TorchDispatchMode), then pause.

        The pause keeps the cost at most ALLOC_DUTY_CYCLE of run time; sampling starts only once memory growth is
        suspected (a healthy run never pays the dispatch mode's one-time import).
        """
        from infradoctor.profile.instrument.patches.allocations import allocation_sampler

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
            mode = allocation_sampler(self)
            mode.__enter__()
            self.alloc_entered = True
            state.torch.zeros(1).add_(1)  # the first op in any dispatch mode imports ~800 modules once: pay it here
            self.alloc_started = self.clock()  # ... and leave that one-time cost out of the duty cycle
            self.alloc_mode = mode
            self.alloc_thread = thread
            self.step.alloc_sampled = True
        except Exception as exc:  # noqa: BLE001
            self.alloc_disabled = True
            self.alloc_mode = None
            state.warn_once("memory.alloc-sites", exc)

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
                state.warn_once("cuda.events", exc)
        self.pending_gpu = still[-1000:]
        record["gpu_busy"] = gpu

    # ---- top-level forward -----------------------------------------------------------------------------------
    def module_stats(self, module: Any) -> ModuleStats:
        """Stats shared by every instance of one model (same class and parameter count).

        A model rebuilt per request or per batch stays one entry: the records do not grow with the instances.
        """
        stats = self.instances.get(module)
        if stats is not None:
            return stats
        fresh = ModuleStats(len(self.modules) + 1, module)
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

    def before_forward(self, stats: ModuleStats, now: float) -> None:
        if self.step.t0 < 0:
            self.step.t0 = now
        if stats is self.main_module:
            self.boundary("forward", now, before=True)

    def call_site(self, stats: ModuleStats, frame: FrameType | None) -> CallSiteStats:
        """The user line that called the model (frames of torch and infradoctor passed over)."""
        internal = self.internal_code
        while frame is not None:
            known = internal.get(frame.f_code)
            if known is None:
                known = self.is_internal(frame.f_code)
            if not known:
                break
            frame = frame.f_back
        if frame is not None:
            installed = self.installed_code.get(frame.f_code)
            if installed is None:
                installed = self.is_installed(frame.f_code)
            if installed:
                frame = self.user_frame(frame)
        if frame is None:
            return stats.site("?", 0, "?")
        code = frame.f_code
        return stats.site(code.co_filename, frame.f_lineno, code.co_name)

    def after_forward(self, stats: ModuleStats, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                      out: Any, t0: float, t1: float, frame: FrameType | None) -> None:
        torch = state.torch
        dt = t1 - t0
        self.forward_calls += 1
        stats.calls += 1
        stats.time += dt
        site = self.call_site(stats, frame)
        site.calls += 1
        site.time += dt
        if site.first < 0:
            site.first = t0 + self.offset
        site.last = t1 + self.offset
        training = bool(module.training)
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        pending = stats.pending
        if pending is not None:  # the last untracked grad-mode call: no backward came before this call
            stats.pending = None
            pending[0].fallback_unused += 1
            if pending[1]:
                pending[0].train_unused += 1
        if grad and stats.trainable:
            site.grad_calls += 1
            if not self.follow_graph(site, out, training):
                stats.pending = (site, training)
        if training:
            site.train_calls += 1
            if not grad:
                site.train_inference += 1
        if torch.is_autocast_enabled(stats.device):
            stats.autocast_calls += 1
        first_arg = args[0] if args else next(iter(kwargs.values()), None)
        batch = batch_size(first_arg, stats.batch_dim)
        site.batches[batch] = site.batches.get(batch, 0) + 1
        if self.is_sequential(stats, args, kwargs, first_arg):
            site.sequential += 1
        stats.prev_outputs = tuple(weakref.ref(t) for t in shallow_tensors(out))
        if stats.calls <= 3:
            first = first_tensor(first_arg)
            if first is not None:
                dtype = str(first.dtype).replace("torch.", "")
                stats.input_dtypes[dtype] = stats.input_dtypes.get(dtype, 0) + 1
        step = self.step
        step.forward += dt
        step.forwards += 1
        if stats is self.main_module and not step.batches:
            step.samples += batch
        if t0 - self.last_retention_sample >= RETENTION_SAMPLE_INTERVAL_S and self.retention_live < RETENTION_MAX_LIVE:
            self.last_retention_sample = t0
            tensor = first_tensor(out)
            if tensor is not None:
                site.retained_sampled += 1
                self.retention_live += 1
                weakref.finalize(tensor, _freed, site).atexit = False

    def is_sequential(self, stats: ModuleStats, args: tuple[Any, ...], kwargs: dict[str, Any],
                      first_arg: Any) -> bool:
        """This call is fed by the last one (one stream of sequential calls that cannot be batched across its steps).

        Its recurrent state comes back in, or its token context is one token longer (autoregressive decoding).
        """
        fed = False
        prev = stats.prev_outputs
        if prev:
            # identity with what the last call returned and the program still holds (usually nothing is held)
            alive = [o for ref in prev if (o := ref()) is not None]
            if alive:
                values = args[:4] if not kwargs else (*args[:4], *list(kwargs.values())[:4])
                fed = any(t is o for value in values for t in shallow_tensors(value) for o in alive)
        length = sequence_length(first_arg, stats.batch_dim)
        grew = length is not None and stats.prev_length is not None and length == stats.prev_length + 1
        stats.prev_length = length
        return fed or grew

    def follow_graph(self, site: CallSiteStats, out: Any, training: bool) -> bool:
        """Mark the autograd nodes of this call's outputs: whether a backward uses them, how long they live."""
        nodes = [fn for t in shallow_tensors(out, GRAPH_OUTPUTS) if (fn := t.grad_fn) is not None]
        if not nodes:
            return False
        graph = Graph(site, site.calls, training)
        for fn in nodes:
            meta = fn.metadata
            if GRAPH_KEY in meta:
                continue  # the node belongs to an earlier call (an output that passes its input through)
            meta[GRAPH_KEY] = graph
            fn.register_hook(graph.fire)
            graph.attached = True
        if not graph.attached:
            return False
        site.graphs += 1
        site.live += 1
        if training:
            site.train_live += 1
        if site.live == 1:
            site.heap_start = self.last_heap
        if site.live > site.live_max:
            site.live_max = site.live
            if site.live >= MEASURE_KEPT_FROM and site.live & (site.live - 1) == 0 and site.heap_start is not None:
                held = self.memory_now(site) - site.heap_start
                if site.held_bytes is None or held > site.held_bytes:
                    site.held_bytes = held
        return True

    def memory_now(self, site: CallSiteStats) -> int:
        """Heap in use now (CUDA allocator when CUDA is in use)."""
        if self.cuda_in_use():
            with contextlib.suppress(Exception):
                return int(state.torch.cuda.memory_allocated())
        return self.memory.heap() or 0

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
        local = state.local
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
            if getattr(local, "top", False) or getattr(local, "in_fetch", False):
                return call(*args, **kwargs)
            t0 = clock()
            try:
                rec.before_forward(stats, t0)
            except Exception as exc:  # noqa: BLE001
                state.warn_once("forward.before", exc)
            events = None
            if stats.device == "cuda":
                events = _cuda_event_pair()
            local.top = True
            try:
                out = call(*args, **kwargs)
            finally:
                local.top = False
            t1 = clock()
            try:
                if events is not None:
                    events[1].record()
                    rec.pending_gpu.append((events[0], events[1], "forward"))
                rec.after_forward(stats, target(), args, kwargs, out, t0, t1, sys._getframe(1))
            except Exception as exc:  # noqa: BLE001
                state.warn_once("forward.after", exc)
            return out

        timed_forward.__infradoctor__ = True  # type: ignore[attr-defined]
        # what inspect.signature(model.forward) shows (argument checks in pipelines); holds no module reference
        with contextlib.suppress(TypeError, ValueError):
            timed_forward.__signature__ = inspect.signature(forward)  # type: ignore[attr-defined]
        module.__dict__["forward"] = timed_forward

    # ---- discovery hooks -------------------------------------------------------------------------------------
    def arm_discovery(self) -> None:
        if self.discovery_handles:
            self.discovery_quiet = 0
            return
        from torch.nn.modules import module as module_mod

        self.discovery_quiet = 0
        self.discovery_handles = [
            module_mod.register_module_forward_pre_hook(self.discovery_pre),
            module_mod.register_module_forward_hook(self.discovery_post, always_call=True),
        ]

    def disarm_discovery(self) -> None:
        """Drop the global hooks (called from the pre-hook of a top-level call, whose post-hook will not run)."""
        handles, self.discovery_handles = self.discovery_handles, []
        for handle in handles:
            handle.remove()
        state.local.depth = 0  # this call's depth would otherwise stay counted and hide every later model

    def discovery_pre(self, module: Any, args: Any) -> None:
        local = state.local
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        if depth or getattr(local, "top", False):
            return
        try:
            if getattr(local, "in_fetch", False):
                # a transform inside Dataset.__getitem__ or a collate function: data loading, not a model
                name = type(module).__name__
                if name in self.data_modules or len(self.data_modules) < 32:
                    self.data_modules[name] = self.data_modules.get(name, 0) + 1
                return
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
            local.discovering = (module, stats, now, args)
        except Exception as exc:  # noqa: BLE001
            state.warn_once("forward.discovery", exc)

    def discovery_post(self, module: Any, args: Any, out: Any) -> None:
        local = state.local
        local.depth = max(0, getattr(local, "depth", 1) - 1)
        pending = getattr(local, "discovering", None)
        if pending is None or pending[0] is not module or local.depth:
            return
        local.discovering = None
        try:
            _, stats, t0, call_args = pending
            self.after_forward(stats, module, tuple(call_args or ()), {}, out, t0, self.clock(), sys._getframe(1))
        except Exception as exc:  # noqa: BLE001
            state.warn_once("forward.discovery", exc)

    def backward_done(self) -> None:
        """A backward ran: untracked grad-mode calls before it were used."""
        for stats in self.modules.values():
            stats.pending = None

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
            "cuda_used": self.cuda_in_use(),
            "mode": self.mode,
            "steps": self.steps_total,
            "main_module": self.main_module.key if self.main_module else None,
            "modules": [m.to_json() for m in list(self.modules.values())],
            "data_modules": dict(self.data_modules),
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
        if not self.cuda or state.torch is None:
            return False
        try:
            return bool(state.torch.cuda.is_initialized())
        except Exception:  # noqa: BLE001
            return False

    def cuda_peak(self) -> int | None:
        if not self.cuda_in_use():
            return None
        try:
            return int(state.torch.cuda.max_memory_allocated())
        except Exception:  # noqa: BLE001
            return None

    def precision(self) -> dict[str, Any]:
        if not self.torch_imported:
            return {}
        try:
            torch = state.torch
            out: dict[str, Any] = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
            if self.cuda_in_use():
                out["allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
                out["bf16_supported"] = bool(torch.cuda.is_bf16_supported())
                out["capability"] = list(torch.cuda.get_device_capability())
                out["device_name"] = torch.cuda.get_device_name()
            return out
        except Exception as exc:  # noqa: BLE001
            state.warn_once("precision", exc)
            return {}

    def flush(self, steps_only: bool = False) -> None:
        """Append buffered steps and (unless ``steps_only``) replace the state file (atomic rename)."""
        with state.lock:
            buffer, self.step_buffer = self.step_buffer, []
            try:
                if buffer:
                    with open(self.steps_path, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(buffer, separators=(",", ":")) + "\n")
                if steps_only:
                    return
                self.last_state_write = time.monotonic()
                snapshot = self.snapshot()
                tmp = f"{self.state_path}.tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump(snapshot, fh, separators=(",", ":"))
                os.replace(tmp, self.state_path)
            except RuntimeError:
                pass  # a dict changed while the writer thread read it: the next flush catches up
            except Exception as exc:  # noqa: BLE001
                state.warn_once("evidence.write", exc)

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
            if self.has_content():
                self.close_step(self.clock())
                if self.step_buffer:
                    self.step_buffer[-1]["partial"] = True
        except Exception as exc:  # noqa: BLE001
            state.warn_once("finish", exc)
        self.final = True
        self.writer_stop.set()
        self.writer_wake.set()
        self.flush()


def installed_dirs() -> tuple[str, ...]:
    """Folders of the standard library and installed packages."""
    import site
    import sysconfig

    dirs = set()
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        with contextlib.suppress(KeyError, ValueError):
            dirs.add(os.path.abspath(sysconfig.get_path(name)) + os.sep)
    with contextlib.suppress(AttributeError):
        dirs.update(os.path.abspath(p) + os.sep for p in site.getsitepackages())
    return tuple(sorted(dirs))


def _freed(site: CallSiteStats) -> None:
    site.retained_freed += 1
    rec = state.recorder
    if rec is not None:
        rec.retention_live -= 1


def _cuda_event_pair() -> tuple[Any, Any] | None:
    try:
        torch = state.torch
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        return start, end
    except Exception as exc:  # noqa: BLE001
        state.warn_once("cuda.events", exc)
        return None
