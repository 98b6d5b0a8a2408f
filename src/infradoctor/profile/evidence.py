"""What a profiled run leaves behind, as frozen dataclasses: read from the events folder or from recorded JSON.

The child writes ``<pid>.steps.jsonl`` (a JSON array of steps per line), ``<pid>.state.json`` and
``<pid>.worker.json`` (see ``instrument``); :func:`read_events` turns them into a :class:`ProfileEvidence`.
``ProfileEvidence.to_dict``/``from_dict`` round-trip, so rules are tested on recorded evidence exactly as on live
runs.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from infradoctor.profile.instrument import START_ERROR_FILE

T = TypeVar("T")


def _build(cls: type[T], data: Mapping[str, Any]) -> T:
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class StepRecord:
    """One step: from one boundary (optimizer step, DataLoader batch or top-level forward) to the next."""

    index: int
    """0-based step number."""
    start: float
    """Start, seconds on the machine's monotonic clock."""
    end: float
    """End, same clock."""
    data_wait_s: float = 0.0
    """Time inside the DataLoader's ``__next__``."""
    h2d_s: float = 0.0
    """Time in host-to-device copies (GPU only)."""
    forward_s: float = 0.0
    """Time in top-level module calls."""
    backward_s: float = 0.0
    """Time in ``autograd.backward``/``grad``."""
    optimizer_s: float = 0.0
    """Time in ``optimizer.step()``."""
    sync_s: float = 0.0
    """Time in host reads of tensor values (``.item()``, ``.tolist()``, ...) outside forward."""
    load_s: float = 0.0
    """Time in ``torch.load``/``load_state_dict``/``from_pretrained``."""
    samples: int = 0
    """Samples processed (batch size of the DataLoader batches, else of the main model's forward calls)."""
    forwards: int = 0
    """Top-level forward calls."""
    backwards: int = 0
    """Backward calls."""
    syncs: int = 0
    """Host reads of tensor values from user code."""
    rss_bytes: int | None = None
    """Process resident set size at the end of the step, when read (at most 10 reads/s)."""
    heap_bytes: int | None = None
    """glibc heap in use (includes CPU tensor storage) at the end of the step, when read."""
    cuda_alloc_bytes: int | None = None
    """CUDA allocator's allocated bytes, when on GPU and read."""
    gpu_busy_s: float | None = None
    """GPU time of forward/backward resolved from CUDA events during this step (GPU only)."""
    partial: bool = False
    """The last step, cut short by the end of the run."""
    alloc_sampled: bool = False
    """Allocation sites were followed during this step (slower: left out of timing statistics)."""

    @property
    def duration_s(self) -> float:
        """Wall time of the step."""
        return max(0.0, self.end - self.start)

    @property
    def other_s(self) -> float:
        """Time not in any measured phase: other Python."""
        known = self.data_wait_s + self.h2d_s + self.forward_s + self.backward_s + self.optimizer_s + self.sync_s
        return max(0.0, self.duration_s - known - self.load_s)

    @classmethod
    def from_event(cls, row: Mapping[str, Any]) -> StepRecord:
        """From one line of ``<pid>.steps.jsonl``."""
        return cls(
            index=int(row["i"]),
            start=float(row["t0"]),
            end=float(row["t1"]),
            data_wait_s=float(row.get("data_wait", 0.0)),
            h2d_s=float(row.get("h2d", 0.0)),
            forward_s=float(row.get("forward", 0.0)),
            backward_s=float(row.get("backward", 0.0)),
            optimizer_s=float(row.get("optimizer", 0.0)),
            sync_s=float(row.get("sync", 0.0)),
            load_s=float(row.get("load", 0.0)),
            samples=int(row.get("samples", 0)),
            forwards=int(row.get("forwards", 0)),
            backwards=int(row.get("backwards", 0)),
            syncs=int(row.get("syncs", 0)),
            rss_bytes=row.get("rss"),
            heap_bytes=row.get("heap"),
            cuda_alloc_bytes=row.get("cuda_alloc"),
            gpu_busy_s=row.get("gpu_busy"),
            partial=bool(row.get("partial", False)),
            alloc_sampled=bool(row.get("alloc_sampled", False)),
        )


@dataclass(frozen=True)
class CallSite:
    """One user line that calls a model, and what its calls did (the unit the model rules judge)."""

    file: str
    """Source file."""
    line: int
    """Line."""
    function: str = ""
    """Enclosing function."""
    calls: int = 0
    """Calls from this line."""
    time_s: float = 0.0
    """Wall time inside them."""
    grad_calls: int = 0
    """Calls with autograd recording (trainable model)."""
    graphs: int = 0
    """Of those, calls whose output's autograd graph was followed."""
    used_graphs: int = 0
    """Graphs a backward ran through (training)."""
    unused_grad_calls: int = 0
    """Grad-mode calls whose graph no backward used (freed unused, or alive unused at the end)."""
    kept_graphs: int = 0
    """Unused graphs kept alive across at least 3 later calls from this line (held in a list or a running sum)."""
    kept_span_calls: int = 0
    """Most later calls one unused graph outlived."""
    kept_peak: int = 0
    """Most graphs from this line alive at once (before a backward used them or they were freed)."""
    kept_held_bytes: int | None = None
    """Memory held at that peak over the memory when the first of them was made (read at 8, 16, 32, ... alive)."""
    train_mode_calls: int = 0
    """Calls with ``module.training`` true."""
    train_mode_inference_calls: int = 0
    """Calls in train mode that were not training (grad off, or a graph no backward used)."""
    batch_sizes: Mapping[str, int] = field(default_factory=dict)
    """Batch size (in the model's batch dimension) -> calls."""
    sequential_calls: int = 0
    """Calls fed by the previous call (its recurrent state passed back, or a token context one longer)."""
    first_s: float = -1.0
    """First call, monotonic seconds."""
    last_s: float = -1.0
    """Last call, monotonic seconds."""
    retained_sampled: int = 0
    """Outputs sampled for survival."""
    retained_alive: int = 0
    """Sampled outputs still alive at the end."""

    @classmethod
    def from_state(cls, row: Mapping[str, Any]) -> CallSite:
        """From the child's state file."""
        data = dict(row)
        data["batch_sizes"] = dict(data.get("batch_sizes") or {})
        return _build(cls, data)

    @property
    def batch1_calls(self) -> int:
        """Calls with a batch of one."""
        return int(self.batch_sizes.get("1", 0))

    @property
    def inference_calls(self) -> int:
        """Calls that were not training: grad off, or grad on with a graph no backward used."""
        return max(0, self.calls - (self.grad_calls - self.unused_grad_calls))

    def median_batch(self) -> int:
        """Median batch size over calls (0 without calls)."""
        return median_batch(self.batch_sizes)


def median_batch(batch_sizes: Mapping[str, int]) -> int:
    """Median of a batch size -> calls histogram (0 when empty)."""
    pairs = sorted((int(k), v) for k, v in batch_sizes.items())
    total = sum(v for _, v in pairs)
    seen = 0
    for size, count in pairs:
        seen += count
        if seen * 2 >= total:
            return size
    return 0


@dataclass(frozen=True)
class ModuleUse:
    """How one top-level ``nn.Module`` instance was called."""

    id: int
    """Identity within the run."""
    cls: str
    """Class name."""
    params: int
    """Parameter count."""
    trainable: bool
    """Some parameter requires grad."""
    mode_layers: tuple[str, ...]
    """Dropout/batch-norm layer classes inside it (they behave differently in train mode)."""
    device: str
    """Device type of its first parameter."""
    dtype: str
    """Dtype of its first parameter."""
    calls: int
    """Top-level calls."""
    time_s: float
    """Wall time inside those calls."""
    grad_calls: int
    """Calls with autograd recording."""
    unused_grad_calls: int
    """Calls with autograd recording that no backward followed before the module's next call."""
    train_mode_calls: int
    """Calls with ``module.training`` true."""
    train_mode_inference_calls: int
    """Calls in train mode with grad off (inference in train mode)."""
    batch_sizes: Mapping[str, int]
    """Batch size -> number of calls."""
    sites: tuple[Mapping[str, Any], ...]
    """User call sites of the first calls: ``{file, line, calls}``."""
    autocast_calls: int = 0
    """Calls under autocast."""
    retained_sampled: int = 0
    """Outputs sampled for survival."""
    retained_alive: int = 0
    """Sampled outputs still alive at the end (kept by the program)."""
    input_dtypes: Mapping[str, int] = field(default_factory=dict)
    """Dtype of the first tensor input of the first calls -> count."""
    batch_dim: int = 0
    """Dimension of the input that holds the batch (1 for sequence-first RNNs and transformers)."""
    call_sites: tuple[CallSite, ...] = ()
    """Every user line that called it, with what those calls did."""

    @classmethod
    def from_state(cls, row: Mapping[str, Any]) -> ModuleUse:
        """From the child's state file."""
        data = dict(row)
        data["cls"] = data.pop("class", "?")
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> ModuleUse:
        """From recorded evidence (``to_dict``)."""
        data = dict(row)
        data["time_s"] = float(data.get("time_s", 0.0))
        data["mode_layers"] = tuple(data.get("mode_layers") or ())
        data["sites"] = tuple(data.get("sites") or ())
        data["batch_sizes"] = dict(data.get("batch_sizes") or {})
        data["input_dtypes"] = dict(data.get("input_dtypes") or {})
        data["call_sites"] = tuple(
            c if isinstance(c, CallSite) else CallSite.from_state(c) for c in data.get("call_sites") or ()
        )
        return _build(cls, data)

    def median_batch(self) -> int:
        """Median batch size over calls (0 without calls)."""
        return median_batch(self.batch_sizes)


@dataclass(frozen=True)
class SyncSite:
    """A user line that reads tensor values on the host (``.item()``, ``.tolist()``, ``for x in tensor`` ...)."""

    kind: str
    """Method: ``item``, ``tolist``, ``cpu``, ``numpy``, ``bool``, ``float``, ``int``, ``iter``, ``repr``, ...."""
    file: str
    """Source file."""
    line: int
    """Line."""
    function: str
    """Enclosing function."""
    calls: int
    """Calls over the run."""
    time_s: float
    """Time inside the calls."""
    span_s: float
    """Per step, time from this site's first to last call, summed: the loop around it."""
    elements: int
    """Elements iterated (``iter`` only)."""
    steps: int
    """Steps in which the site was hit."""


@dataclass(frozen=True)
class LoadEvent:
    """Weight loading at one call site: ``torch.load``, ``load_state_dict``, ``*.from_pretrained``."""

    kind: str
    """Which call."""
    file: str
    """User call site file."""
    line: int
    """User call site line."""
    calls: int
    """How many times."""
    time_s: float
    """Total time."""


@dataclass(frozen=True)
class Construction:
    """``nn.Module`` construction at one user call site."""

    file: str
    """Call site file."""
    line: int
    """Call site line."""
    count: int
    """Distinct top-level modules built there."""
    cls: str
    """Class of the last one."""
    params: int | None
    """Its parameter count, when it was still alive at the last snapshot."""
    time_s: float = 0.0
    """Approximate construction time (first to last submodule construction of each build), summed."""

    @classmethod
    def from_state(cls, row: Mapping[str, Any]) -> Construction:
        """From the child's state file."""
        return cls(str(row.get("file")), int(row.get("line") or 0), int(row.get("count", 0)),
                   str(row.get("class", "?")), row.get("params"), float(row.get("time_s") or 0.0))


@dataclass(frozen=True)
class LoaderConfig:
    """A ``DataLoader`` and how it was used."""

    file: str | None
    """Where it was built."""
    line: int | None
    """Line."""
    num_workers: int | None
    """``num_workers``."""
    pin_memory: bool | None
    """``pin_memory``."""
    persistent_workers: bool | None
    """``persistent_workers``."""
    prefetch_factor: int | None
    """``prefetch_factor`` (None without workers)."""
    batch_size: int | None
    """``batch_size``."""
    dataset: str
    """Dataset class."""
    dataset_len: int | None
    """len(dataset), when defined."""
    iterators: int
    """Iterators made (epochs)."""
    batches: int
    """Batches taken."""
    wait_s: float
    """Time waiting in ``__next__``."""
    first_batch_waits: tuple[float, ...] = ()
    """Wait for the first batch of each iterator (worker start-up shows here)."""
    multiprocessing_context: str | None = None
    """Worker start method when set."""

    @classmethod
    def from_state(cls, row: Mapping[str, Any]) -> LoaderConfig:
        """From the child's state file."""
        data = dict(row)
        data["first_batch_waits"] = tuple(data.get("first_batch_waits") or ())
        return _build(cls, data)


@dataclass(frozen=True)
class SystemSample:
    """One sample of the machine, taken by the parent while the workload ran."""

    t: float
    """Monotonic time."""
    cpu_percent: tuple[float, ...]
    """Busy percent per core since the previous sample."""
    process_cpu_percent: float | None
    """CPU percent of the workload's process tree (100 = one core)."""
    rss_bytes: int | None
    """RSS of the workload's main process."""
    gpu_util_percent: tuple[float, ...] = ()
    """NVML utilisation per GPU (empty without NVML)."""
    gpu_memory_bytes: tuple[int, ...] = ()
    """NVML memory used per GPU."""
    tree_pss_bytes: int | None = None
    """Proportional set size of the whole process tree (pages shared by forked workers counted once)."""
    processes: int = 1
    """Processes in the tree."""

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> SystemSample:
        """Inverse of ``asdict``."""
        data = dict(row)
        data["cpu_percent"] = tuple(data.get("cpu_percent") or ())
        data["gpu_util_percent"] = tuple(data.get("gpu_util_percent") or ())
        data["gpu_memory_bytes"] = tuple(data.get("gpu_memory_bytes") or ())
        return _build(cls, data)


@dataclass(frozen=True)
class ProfileEvidence:
    """Everything measured about one profiled run."""

    argv: tuple[str, ...]
    """The workload's command line."""
    exit_status: int | None
    """Exit code (negative: killed by that signal); None while it still runs."""
    stop_reason: str
    """``exit``, ``steps`` (``--steps`` reached), ``duration``, ``stopped`` (stop()), ``interrupted``."""
    duration_s: float
    """Wall time from start to exit."""
    instrumented: bool
    """The recorder started in the workload (false when it died before, or could not be injected)."""
    torch_imported: bool
    """The workload imported torch (false: CPU-only profile)."""
    torch_version: str | None = None
    """torch version seen in the workload."""
    cuda: bool = False
    """CUDA was available in the workload."""
    step_mode: str | None = None
    """What marks a step: ``optimizer``, ``dataloader``, ``forward`` or None (no steps)."""
    steps: tuple[StepRecord, ...] = ()
    """Every step, in order."""
    modules: tuple[ModuleUse, ...] = ()
    """Top-level modules."""
    main_module: int | None = None
    """Id of the largest top-level module (the model)."""
    backward_calls: int = 0
    """Backward calls."""
    backward_time_s: float = 0.0
    """Time in backward."""
    optimizer_steps: int = 0
    """``optimizer.step()`` calls."""
    optimizer_time_s: float = 0.0
    """Time in them."""
    syncs: tuple[SyncSite, ...] = ()
    """Host reads of tensor values by site."""
    loads: tuple[LoadEvent, ...] = ()
    """Weight loading by site."""
    constructions: tuple[Construction, ...] = ()
    """Module construction by site."""
    dataloaders: tuple[LoaderConfig, ...] = ()
    """DataLoaders used."""
    fetch: Mapping[str, Any] = field(default_factory=dict)
    """Dataset fetches in the main process: ``calls``, ``items``, ``time_s``, ``cpu_s`` (CPU time of the fetching
    thread: the rest of ``time_s`` waited on I/O, sleeps or locks)."""
    worker_fetch: Mapping[str, Any] = field(default_factory=dict)
    """Dataset fetches in DataLoader workers: ``workers``, ``calls``, ``items``, ``time_s``, ``cpu_s``."""
    h2d: Mapping[str, Any] = field(default_factory=dict)
    """Host-to-device copies: ``copies``, ``bytes``, ``pageable_copies``, ``pageable_bytes``, ``time_s``."""
    memory: Mapping[str, Any] = field(default_factory=dict)
    """Process memory: ``first_rss``, ``peak_rss``, ``first_heap``, ``peak_heap``, ``cuda_peak`` (bytes)."""
    peak_rss_bytes: int | None = None
    """Peak RSS of the workload from the kernel (wait4), else the highest reading."""
    precision: Mapping[str, Any] = field(default_factory=dict)
    """Matmul precision settings and device support (bf16, TF32 capability)."""
    system: tuple[SystemSample, ...] = ()
    """Machine samples taken by the parent."""
    errors: tuple[Mapping[str, Any], ...] = ()
    """Instrumentation problems: ``{source, message, count}``."""
    started_wall: float | None = None
    """Start, Unix time."""
    cpu_count: int = 0
    """Logical CPUs of the machine (0 when unknown)."""
    exception: Mapping[str, Any] | None = None
    """The exception that ended the workload: ``type``, ``module``, ``message`` and the innermost user frame
    ``file``, ``line``, ``function`` (None when it ended without one)."""
    alloc_sites: tuple[Mapping[str, Any], ...] = ()
    """Sampled tensor allocations by user line once growth was suspected: ``file``, ``line``, ``sampled``,
    ``sampled_bytes``, ``alive``, ``alive_bytes`` (still alive at the end)."""
    cuda_used: bool = False
    """The workload initialised CUDA (a device was in use, not only available)."""
    data_modules: Mapping[str, int] = field(default_factory=dict)
    """Modules called inside dataset fetches (transforms: data loading, not models), class -> calls."""
    peak_tree_pss_bytes: int | None = None
    """Peak proportional set size of the workload's whole process tree (shared pages counted once)."""
    child_processes: int = 0
    """Most processes seen in the workload's tree besides the main one (DataLoader workers, server workers)."""
    python_program: bool = True
    """The command runs Python (only Python processes are instrumented; others are measured from outside)."""
    cwd: str | None = None
    """The workload's working folder (relative source paths in the evidence are relative to it)."""

    def source_path(self, file: str) -> str:
        """A source file named in the evidence, as a path this process can open."""
        if not file or os.path.isabs(file) or not self.cwd:
            return file
        return os.path.join(self.cwd, file)

    @property
    def device_in_use(self) -> bool:
        """A GPU was used by the workload (CUDA initialised, a model on it, or copies to it)."""
        return self.cuda_used or any(m.device == "cuda" for m in self.modules) or bool(self.h2d.get("copies"))

    def to_dict(self) -> dict[str, Any]:
        """JSON form (for recording evidence)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProfileEvidence:
        """Inverse of :meth:`to_dict`."""
        d = dict(data)
        d["argv"] = tuple(d.get("argv") or ())
        d["steps"] = tuple(_build(StepRecord, s) for s in d.get("steps") or ())
        d["modules"] = tuple(ModuleUse.from_dict(m) for m in d.get("modules") or ())
        d["syncs"] = tuple(_build(SyncSite, s) for s in d.get("syncs") or ())
        d["loads"] = tuple(_build(LoadEvent, s) for s in d.get("loads") or ())
        d["constructions"] = tuple(_build(Construction, s) for s in d.get("constructions") or ())
        d["dataloaders"] = tuple(
            _build(LoaderConfig, {**s, "first_batch_waits": tuple(s.get("first_batch_waits") or ())})
            for s in d.get("dataloaders") or ()
        )
        d["system"] = tuple(SystemSample.from_dict(s) for s in d.get("system") or ())
        d["errors"] = tuple(d.get("errors") or ())
        d["alloc_sites"] = tuple(d.get("alloc_sites") or ())
        return _build(cls, d)

    def module(self, key: int | None) -> ModuleUse | None:
        """The module with this id."""
        return next((m for m in self.modules if m.id == key), None)


def _read_text(path: Path) -> str | None:
    with contextlib.suppress(OSError, UnicodeDecodeError):
        return path.read_text(encoding="utf-8").strip() or None
    return None


def _read_json(path: Path) -> dict[str, Any] | None:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else None
    return None


MAX_STEPS_KEPT = 100_000
"""Steps kept in memory: beyond this, every other step is dropped (repeatedly), so shares stay representative."""


def _read_steps(path: Path, limit: int = MAX_STEPS_KEPT) -> list[StepRecord]:
    steps: list[StepRecord] = []
    stride = 1
    seen = -1
    with contextlib.suppress(OSError), path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                rows = json.loads(line)
                chunk = [StepRecord.from_event(row) for row in (rows if isinstance(rows, list) else [rows])]
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a kill
            for step in chunk:
                seen += 1
                if seen % stride:
                    continue
                steps.append(step)
                if len(steps) >= limit:
                    steps = steps[::2]
                    stride *= 2
    return steps


def read_events(
    events_dir: Path,
    *,
    main_pid: int | None,
    argv: Sequence[str],
    exit_status: int | None,
    stop_reason: str,
    duration_s: float,
    system: Sequence[SystemSample] = (),
    peak_rss_bytes: int | None = None,
    peak_tree_pss_bytes: int | None = None,
    python_program: bool = True,
    cwd: str | None = None,
) -> ProfileEvidence:
    """Evidence from the events folder; the main process is ``main_pid`` if it wrote state, else the busiest."""
    states: dict[int, dict[str, Any]] = {}
    for path in sorted(events_dir.glob("*.state.json")):
        state = _read_json(path)
        if state is not None and state.get("role") == "main":
            states[int(state.get("pid", 0))] = state
    workers = [w for w in (_read_json(p) for p in sorted(events_dir.glob("*.worker.json"))) if w]
    worker_fetch = {
        "workers": len(workers),
        "calls": sum(int(w.get("calls", 0)) for w in workers),
        "items": sum(int(w.get("items", 0)) for w in workers),
        "time_s": sum(float(w.get("time_s", 0.0)) for w in workers),
        "cpu_s": sum(float(w.get("cpu_s", 0.0)) for w in workers),
    }
    state = states.get(main_pid or -1)
    if state is None and states:
        state = max(states.values(), key=lambda s: (int(s.get("steps", 0)), bool(s.get("torch_imported"))))
    common: dict[str, Any] = {
        "argv": tuple(argv),
        "exit_status": exit_status,
        "stop_reason": stop_reason,
        "duration_s": duration_s,
        "system": tuple(system),
        "worker_fetch": worker_fetch,
        "cpu_count": os.cpu_count() or 0,
        "peak_tree_pss_bytes": peak_tree_pss_bytes,
        "child_processes": max((s.processes - 1 for s in system), default=0),
        "python_program": python_program,
        "cwd": cwd,
    }
    if state is None:
        start_error = _read_text(events_dir / START_ERROR_FILE)
        errors = ({"source": "start", "message": start_error, "count": 1},) if start_error else ()
        return ProfileEvidence(instrumented=False, torch_imported=False, peak_rss_bytes=peak_rss_bytes,
                               errors=errors, **common)
    pid = int(state["pid"])
    steps = sorted(_read_steps(events_dir / f"{pid}.steps.jsonl"), key=lambda s: s.index)
    memory = dict(state.get("memory") or {})
    readings = [s.rss_bytes for s in steps if s.rss_bytes] + [memory.get("peak_rss") or 0, memory.get("rss") or 0]
    readings += [s.rss_bytes or 0 for s in system]
    peak = max([peak_rss_bytes or 0, *readings]) or None
    return ProfileEvidence(
        instrumented=True,
        torch_imported=bool(state.get("torch_imported")),
        torch_version=state.get("torch_version"),
        cuda=bool(state.get("cuda")),
        step_mode=state.get("mode"),
        steps=tuple(steps),
        modules=tuple(ModuleUse.from_state(m) for m in state.get("modules") or ()),
        main_module=state.get("main_module"),
        backward_calls=int(state.get("backward_calls", 0)),
        backward_time_s=float(state.get("backward_time_s", 0.0)),
        optimizer_steps=int(state.get("optimizer_steps", 0)),
        optimizer_time_s=float(state.get("optimizer_time_s", 0.0)),
        syncs=tuple(_build(SyncSite, s) for s in state.get("syncs") or ()),
        loads=tuple(_build(LoadEvent, s) for s in state.get("loads") or ()),
        constructions=tuple(Construction.from_state(c) for c in state.get("constructions") or ()),
        dataloaders=tuple(LoaderConfig.from_state(d) for d in state.get("dataloaders") or ()),
        fetch=dict(state.get("fetch") or {}),
        h2d=dict(state.get("h2d") or {}),
        memory=memory,
        peak_rss_bytes=peak,
        precision=dict(state.get("precision") or {}),
        errors=tuple(state.get("errors") or ()),
        alloc_sites=tuple(state.get("alloc_sites") or ()),
        exception=state.get("exception") or None,
        started_wall=state.get("started_wall"),
        cuda_used=bool(state.get("cuda_used")),
        data_modules=dict(state.get("data_modules") or {}),
        **common,
    )
