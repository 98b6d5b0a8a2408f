"""The profile command's typed metrics (``Result.metrics`` of ``infradoctor profile``, with or without ``--load-url``).

The layout is described in :mod:`infradoctor.profile` (and, for ``--load-url``, in :mod:`infradoctor.profile_load`);
every field has its docstring here. :func:`infradoctor.profile.analyze.build_metrics` builds them from a run's
analysis; :func:`infradoctor.profile_load.run.merge_results` adds the service side.

The JSON form is the one the command has always written: :meth:`ProfileMetrics.to_dict` leaves out the headline
numbers that are not available, the ``h2d``/``precision`` counters the workload did not report, and (without
``--load-url``) the ``load`` and ``service`` keys.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from infradoctor.load.metrics import LoadHeadline, LoadMetrics
from infradoctor.metrics import JSON_KEY, Metrics

PHASE_NAMES = ("data_wait", "h2d", "forward", "backward", "optimizer", "sync", "load", "other")
"""Step phases, in the order the breakdown bar shows them (the fields of :class:`StepPhases`)."""


# ---------------------------------------------------------------------------------------------------- workload
@dataclass(frozen=True, kw_only=True)
class WorkloadException(Metrics):
    """The exception that ended the program, with the innermost frame of the user's own code."""

    type: str
    """Exception class name, e.g. ``RuntimeError``."""
    module: str | None
    """Module of the exception class (``builtins``, ``torch``, ...)."""
    message: str
    """Its message (at most 2000 characters)."""
    file: str | None
    """Source file of the innermost user frame."""
    line: int | None
    """Line there."""
    function: str | None
    """Function there."""


@dataclass(frozen=True, kw_only=True)
class ProfileWorkload(Metrics):
    """How the workload ran and ended."""

    exit_status: int | None
    """Exit status as a shell shows it (128+N when killed by signal N); None while it ran."""
    signal: int | None
    """The signal that killed it, or None."""
    stop_reason: str
    """``exit``, ``steps`` (the step limit), ``duration`` (the time limit), ``stopped`` or ``interrupted``."""
    duration_s: float
    """Wall time from start to exit."""
    instrumented: bool
    """The profiler ran inside the workload."""
    torch_imported: bool
    """The workload imported torch."""
    torch_version: str | None
    """torch version seen in the workload."""
    cuda: bool
    """CUDA was available in the workload."""
    profile_kind: str
    """``torch`` or ``cpu-only`` (no torch: process time, CPU and memory only)."""
    python_program: bool = True
    """The command runs Python (other programs are measured from outside only)."""
    exception: WorkloadException | None = None
    """The exception that ended the program; None without one."""


# ---------------------------------------------------------------------------------------------------- headline
@dataclass(frozen=True)
class ProfileHeadline(LoadHeadline):
    """Flat key numbers (units in the names); what is not available is left out.

    A plain profile has the workload's numbers (``steps`` ... ``gpu_util_mean_pct``); ``--load-url`` puts the load
    headline (the fields of :class:`~infradoctor.load.metrics.LoadHeadline`) and the service's numbers before them.
    """

    loop_blocked_s: float | None = None
    """``--load-url``: the most time one server process's event loop was stalled after start-up."""
    loop_lag_p99_ms: float | None = None
    """``--load-url``: the highest p99 event-loop lag of the server's processes."""
    workers: int | None = None
    """``--load-url``: the server's worker processes."""
    steps: int | None = None
    """Steps seen (with thinned-out long runs: the last step's number + 1)."""
    samples_per_s: float | None = None
    """Steady samples per second."""
    steps_per_s: float | None = None
    """Steady steps per second."""
    step_time_ms_p50: float | None = None
    """Median steady step time."""
    step_time_ms_p90: float | None = None
    """90th percentile steady step time."""
    data_wait_fraction: float | None = None
    """Share of steady step time spent waiting for data."""
    peak_rss_mb: float | None = None
    """Peak resident memory of the main process (MB)."""
    peak_tree_pss_mb: float | None = None
    """Peak proportional memory of the whole process tree (shared pages counted once, MB)."""
    cuda_peak_mb: float | None = None
    """GPU: the CUDA allocator's peak (MB)."""
    gpu_util_mean_pct: float | None = None
    """GPU: mean utilisation during the steps (%)."""


# ---------------------------------------------------------------------------------------------------- steps
@dataclass(frozen=True, kw_only=True)
class StepPhases(Metrics):
    """A number per step phase (ms per steady step, or share of steady step time)."""

    data_wait: float | None
    """Waiting in the DataLoader's ``__next__``."""
    h2d: float | None
    """Host-to-device copies."""
    forward: float | None
    """Top-level model calls."""
    backward: float | None
    """Backward passes."""
    optimizer: float | None
    """``optimizer.step()``."""
    sync: float | None
    """Host reads of tensor values outside forward."""
    load: float | None
    """Weight loading."""
    other: float | None
    """Everything else (other Python)."""

    def items(self) -> Iterator[tuple[str, float | None]]:
        """(phase, value) in :data:`PHASE_NAMES` order."""
        return ((name, getattr(self, name)) for name in PHASE_NAMES)


@dataclass(frozen=True, kw_only=True)
class StepTimes(Metrics):
    """Step durations in ms (None without steps of that kind)."""

    p50: float | None
    """Median steady step."""
    p90: float | None
    """90th percentile steady step."""
    p99: float | None
    """99th percentile steady step."""
    mean: float | None
    """Mean steady step."""
    first: float | None
    """The first step."""
    warmup_mean: float | None
    """Mean warm-up step."""


@dataclass(frozen=True, kw_only=True)
class ProfileSteps(Metrics):
    """The steps: how many, what marks them, where their time goes."""

    count: int
    """Steps seen (long runs are thinned: the last kept step's number + 1)."""
    kept: int
    """Steps held for analysis."""
    warmup: int
    """First steps counted as warm-up."""
    steady: int
    """Steady steps (timing statistics come from these)."""
    boundary: str | None
    """What marks a step: ``optimizer``, ``dataloader``, ``forward`` (None without steps)."""
    time_s: float
    """Time of all complete steps."""
    phase_ms_per_step: StepPhases
    """ms per steady step in each phase (None without steady steps)."""
    phase_fraction: StepPhases
    """Share of steady step time in each phase."""
    step_time_ms: StepTimes
    """Step durations."""
    forwards: int
    """Top-level model calls during steps."""
    backwards: int
    """Backward calls."""
    optimizer_steps: int
    """``optimizer.step()`` calls."""


@dataclass(frozen=True, kw_only=True)
class ProfileThroughput(Metrics):
    """Samples and steps per second of the steady steps."""

    samples_per_s: float | None
    """Steady samples per second."""
    steps_per_s: float | None
    """Steady steps per second."""
    batch_size: int | None
    """The model's median batch size."""
    loader_batch_size: int | None
    """The first DataLoader's ``batch_size``."""
    samples: int
    """Samples over all kept steps."""


# ---------------------------------------------------------------------------------------------------- memory
@dataclass(frozen=True, kw_only=True)
class ProfileMemoryTrend(Metrics):
    """A least-squares line through the steady steps' memory readings."""

    source: str
    """``cuda`` (allocator), ``heap`` (glibc heap incl. CPU tensors) or ``rss``."""
    readings: int
    """Readings used."""
    growth_kb_per_step: float
    """Slope."""
    growth_mb: float | None
    """Fitted growth over the steady steps."""
    r2: float
    """Fit quality (1 = perfectly steady growth)."""


MEMORY_COLUMNS = ("step", "rss_mb", "heap_mb", "cuda_mb")
"""Columns of the memory timeline."""


@dataclass(frozen=True, kw_only=True)
class ProfileMemoryTimeline(Metrics):
    """Memory at the end of steps (at most 300 rows, evenly spaced)."""

    columns: tuple[str, ...] = MEMORY_COLUMNS
    """Column names."""
    rows: tuple[tuple[int, float | None, float | None, float | None], ...] = ()
    """Step, RSS, heap and CUDA allocator MB (None where not read)."""


@dataclass(frozen=True, kw_only=True)
class ProfileMemory(Metrics):
    """Process memory and its trend over the steps (MB)."""

    peak_rss_mb: float | None
    """Peak RSS of the main process."""
    peak_tree_pss_mb: float | None
    """Peak PSS of the whole process tree (shared pages counted once)."""
    child_processes: int = 0
    """Most processes seen in the tree besides the main one (DataLoader or server workers)."""
    start_rss_mb: float | None
    """RSS when the profiler started in the workload."""
    peak_heap_mb: float | None
    """Peak glibc heap."""
    cuda_peak_mb: float | None
    """Peak of the CUDA allocator."""
    trend: ProfileMemoryTrend | None
    """The trend over steady steps (None with too few readings)."""
    timeline: ProfileMemoryTimeline = field(default_factory=ProfileMemoryTimeline)
    """Memory per step."""


# ---------------------------------------------------------------------------------------------------- model
@dataclass(frozen=True, kw_only=True)
class ModelCallSite(Metrics):
    """One user line that calls a model, and what its calls did."""

    site: str
    """``file:line``."""
    function: str | None
    """Enclosing function."""
    calls: int
    """Calls from this line."""
    time_ms: float | None
    """Time inside them."""
    batch_size: int
    """Median batch size (0 without calls)."""
    grad_calls: int
    """Calls with autograd recording."""
    unused_grad_calls: int
    """Of those, calls whose graph no backward used."""
    kept_graphs: int
    """Unused graphs kept alive across later calls (held in a list or a running sum)."""
    kept_held_mb: float | None
    """Memory those graphs held at their peak."""
    train_mode_calls: int
    """Calls in train mode."""
    train_mode_inference_calls: int
    """Calls in train mode that were not training."""
    sequential_calls: int
    """Calls fed by the previous call (recurrent state or a growing token context)."""


@dataclass(frozen=True, kw_only=True)
class ModelModule(Metrics):
    """A top-level module with parameters (at most 10, most time first)."""

    cls: str = field(metadata={JSON_KEY: "class"})
    """Class name."""
    params: int
    """Parameter count."""
    device: str
    """Device type of its first parameter."""
    dtype: str
    """Dtype of its first parameter."""
    input_dtypes: dict[str, int] = field(default_factory=dict)
    """Dtype of the first tensor input of the first calls -> count."""
    calls: int
    """Top-level calls."""
    time_ms: float | None
    """Time inside them."""
    batch_size: int
    """Median batch size."""
    batch_dim: int = 0
    """Input dimension that holds the batch (1 for sequence-first models)."""
    grad_calls: int
    """Calls with autograd recording."""
    unused_grad_calls: int
    """Of those, calls whose graph no backward used."""
    train_mode_calls: int
    """Calls in train mode."""
    site: str | None
    """``file:line`` of the line that called it most."""
    call_sites: tuple[ModelCallSite, ...] = ()
    """The lines that called it (at most 5, most calls first)."""


@dataclass(frozen=True, kw_only=True)
class OtherModule(Metrics):
    """A top-level module without parameters (at most 10, most time first)."""

    cls: str = field(metadata={JSON_KEY: "class"})
    """Class name."""
    calls: int
    """Top-level calls."""
    time_ms: float | None
    """Time inside them."""
    site: str | None
    """``file:line`` of the line that called it most."""


@dataclass(frozen=True, kw_only=True)
class ModelLoad(Metrics):
    """Weight loading at one call site."""

    kind: str
    """``torch.load``, ``load_state_dict``, ``from_pretrained``, ..."""
    site: str
    """``file:line``."""
    calls: int
    """How many times."""
    time_ms: float | None
    """Total time."""


@dataclass(frozen=True, kw_only=True)
class ModuleConstruction(Metrics):
    """``nn.Module`` construction at one user call site."""

    cls: str = field(metadata={JSON_KEY: "class"})
    """Class of the last module built there."""
    site: str
    """``file:line``."""
    count: int
    """Distinct top-level modules built there."""
    params: int | None
    """Parameter count of the last one (None when it was gone at the last snapshot)."""


@dataclass(frozen=True, kw_only=True)
class AllocSite(Metrics):
    """Sampled tensor allocations at one user line (once memory growth was suspected)."""

    site: str
    """``file:line``."""
    sampled: int | None
    """Allocations sampled."""
    alive: int | None
    """Of those, still alive at the end."""
    alive_mb: float | None
    """Bytes still alive."""


@dataclass(frozen=True, kw_only=True)
class ProfileModel(Metrics):
    """How the models were used, built and loaded."""

    modules: tuple[ModelModule, ...] = ()
    """Top-level modules with parameters."""
    other_modules: tuple[OtherModule, ...] = ()
    """Top-level modules without parameters."""
    data_modules: dict[str, int] = field(default_factory=dict)
    """Modules called inside dataset fetches (transforms), class -> calls."""
    loads: tuple[ModelLoad, ...] = ()
    """Weight loading by call site."""
    constructions: tuple[ModuleConstruction, ...] = ()
    """Module construction by call site."""
    alloc_sites: tuple[AllocSite, ...] = ()
    """Sampled allocations by line (at most 10, most bytes alive first)."""


# ---------------------------------------------------------------------------------------------------- host reads, data
@dataclass(frozen=True, kw_only=True)
class HostSync(Metrics):
    """A user line that reads tensor values on the host (at most 10, most calls first)."""

    kind: str
    """Method: ``item``, ``tolist``, ``cpu``, ``numpy``, ``iter``, ..."""
    site: str
    """``file:line``."""
    calls: int
    """Calls over the run."""
    per_step: float
    """Calls per kept step."""
    time_ms: float | None
    """Time inside the calls."""
    loop_ms: float | None
    """Time of the loops around them (first to last call per step, summed)."""


@dataclass(frozen=True, kw_only=True)
class DataLoaderUse(Metrics):
    """A ``DataLoader``, its configuration and use."""

    site: str | None
    """``file:line`` where it was built."""
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
    iterators: int
    """Iterators made (epochs)."""
    batches: int
    """Batches taken."""
    wait_ms: float | None
    """Time waiting in ``__next__``."""


@dataclass(frozen=True, kw_only=True)
class ProfileDataloader(Metrics):
    """Data loading."""

    loaders: tuple[DataLoaderUse, ...] = ()
    """DataLoaders used."""
    item_time_ms: float | None
    """Mean time per dataset item (in the workers when there are any)."""
    worker_processes: int = 0
    """DataLoader worker processes that reported."""


@dataclass(frozen=True, kw_only=True)
class ProfileH2d(Metrics):
    """Host-to-device copies (GPU; what the workload did not report is left out)."""

    copies: int | None = None
    """Copies to the GPU."""
    bytes: int | None = None
    """Bytes copied."""
    pageable_copies: int | None = None
    """Copies from pageable (not pinned) memory."""
    pageable_bytes: int | None = None
    """Bytes copied from pageable memory."""
    time_s: float | None = None
    """Time in the copy calls."""
    non_blocking_copies: int | None = None
    """Copies asked with ``non_blocking=True``."""
    pageable_sites: dict[str, int] | None = None
    """Pageable copies by ``file:line`` (at most 20 lines)."""


@dataclass(frozen=True, kw_only=True)
class ProfilePrecision(Metrics):
    """Matmul precision settings and device support (what was not read is left out)."""

    float32_matmul_precision: str | None = None
    """``torch.get_float32_matmul_precision()``."""
    allow_tf32: bool | None = None
    """GPU: ``torch.backends.cuda.matmul.allow_tf32``."""
    bf16_supported: bool | None = None
    """GPU: the device supports bfloat16."""
    capability: tuple[int, ...] | None = None
    """GPU: compute capability (major, minor)."""
    device_name: str | None = None
    """GPU: device name."""


# ---------------------------------------------------------------------------------------------------- system
SYSTEM_COLUMNS = ("t_s", "step", "cpu_percent", "process_cpu_percent", "gpu_util")
"""Columns of the system timeline."""


@dataclass(frozen=True, kw_only=True)
class ProfileSystemTimeline(Metrics):
    """Machine samples (at most 300 rows, evenly spaced) aligned to steps."""

    columns: tuple[str, ...] = SYSTEM_COLUMNS
    """Column names."""
    rows: tuple[tuple[float, int | None, float | None, float | None, float | None], ...] = ()
    """Seconds since the first sample, the step then running, mean CPU % over cores, the workload tree's CPU %
    (100 = one core), mean GPU utilisation %."""


@dataclass(frozen=True, kw_only=True)
class ProfileSystem(Metrics):
    """The machine while the workload ran."""

    cores: int
    """Cores seen (0 when unknown)."""
    cpu_percent_mean: float | None
    """Mean CPU % over all cores."""
    cpu_percent_per_core: tuple[float, ...] = ()
    """Mean CPU % per core."""
    gpu_util_mean_pct: float | None
    """Mean GPU utilisation during the steps (None without NVML samples)."""
    timeline: ProfileSystemTimeline = field(default_factory=ProfileSystemTimeline)
    """Samples over time."""


@dataclass(frozen=True, kw_only=True)
class ProfileDistributions(Metrics):
    """Raw samples kept for comparisons between runs (at most 5000 each)."""

    step_time_ms: tuple[float, ...] = ()
    """Steady step durations."""
    latency_ms: tuple[float, ...] | None = None
    """``--load-url``: the load's successful-response latencies at its reference point."""


# ---------------------------------------------------------------------------------------------------- service
@dataclass(frozen=True, kw_only=True)
class ServiceCpu(Metrics):
    """The server tree's and the machine's CPU during the highest load level."""

    server_cpu_percent: float | None
    """Mean CPU of the server's processes (100 = one core)."""
    machine_cpu_percent: float | None
    """Mean CPU over all cores."""
    cores: int | None
    """Cores."""
    samples: int | None
    """System samples in the window."""


@dataclass(frozen=True, kw_only=True)
class LoopFrame(Metrics):
    """One stack frame seen on a stalled event loop."""

    file: str
    """Source file."""
    line: int
    """Line."""
    function: str
    """Function."""
    coroutine: bool | None = None
    """True for an ``async def`` frame (left out otherwise)."""


@dataclass(frozen=True, kw_only=True)
class LoopStallMetrics(Metrics):
    """A period in which the loop ran no callbacks for at least the stall threshold."""

    started_s: float
    """Start, seconds since the monitor started."""
    duration_s: float
    """How long the loop was held."""
    site: LoopFrame | None
    """The user line seen most while stalled."""
    stack: tuple[LoopFrame, ...] = ()
    """The loop thread's stack at a sample that showed ``site``, innermost first."""
    samples: int = 0
    """Stack samples taken."""


@dataclass(frozen=True, kw_only=True)
class BusySite(Metrics):
    """A user line the busy probes found running on the loop."""

    site: str
    """``file:line``."""
    probes: int
    """Probes that found it."""


@dataclass(frozen=True, kw_only=True)
class LoopSummary(Metrics):
    """Event-loop lag of one server process after start-up (:meth:`LoopLagEvidence.summary_dict`)."""

    interval_s: float
    """Period at which callbacks were posted."""
    stall_threshold_s: float
    """Lag from which a callback marked a stall."""
    observed_s: float
    """How long the loop was watched (after start-up)."""
    beats: int
    """Callbacks that ran."""
    lag_p50_ms: float | None
    """Median lag."""
    lag_p99_ms: float | None
    """p99 lag."""
    lag_max_ms: float | None
    """Largest lag."""
    blocked_s: float
    """Sum of the stalls."""
    stall_count: int
    """Stalls."""
    stalls: tuple[LoopStallMetrics, ...] = ()
    """The first stalls, in order."""
    pid: int | None
    """Process."""
    started_unix: float | None
    """When the monitor started (Unix time)."""
    probe_s: float | None
    """Delay of the busy probes (None: no probing)."""
    probes: int = 0
    """Busy probes taken."""
    busy: tuple[Any, ...] | None = None
    """Always null in a result: the busy probes are counted in ``busy_count``, ``busy_user_share`` and
    ``busy_sites``."""
    busy_count: int = 0
    """Probes that found the loop busy."""
    busy_user_share: float = 0.0
    """Share of probes that found the user's code holding the loop."""
    busy_sites: tuple[BusySite, ...] = ()
    """The user lines found most (at most 5)."""


@dataclass(frozen=True, kw_only=True)
class ServerWorker(Metrics):
    """One worker process of the server and its memory."""

    pid: int
    """Process id."""
    command: str
    """Command line (shortened)."""
    rss_mb: float | None
    """Resident set size (MiB)."""
    private_mb: float | None
    """Memory only this process holds (MiB)."""
    gpu_memory_mb: float | None
    """GPU memory it holds (MiB; None without NVML)."""
    anon_mb: float | None = None
    """Anonymous memory (MiB): heap and tensors it made, not library pages or file-mapped weights."""
    torch_loaded: bool | None = None
    """Whether it has torch's library mapped."""


@dataclass(frozen=True, kw_only=True)
class ServerWorkers(Metrics):
    """How the server is laid out in processes (:meth:`WorkerLayout.to_dict`)."""

    root_pid: int
    """The process started."""
    supervisor_pid: int | None
    """The supervising process (None for a single-process server)."""
    workers: tuple[ServerWorker, ...] = ()
    """The worker processes."""
    gpu_available: bool = False
    """NVML answered (GPU memory values are measured)."""
    baseline_anon_mb: float | None = None
    """Anonymous memory of a fresh process of the workers' interpreter that imported torch: a worker without a model."""
    baseline: str | None = None
    """What that process ran."""


@dataclass(frozen=True, kw_only=True)
class ProfileService(Metrics):
    """``--load-url``: the server, how it was reached and stopped, its event loop and workers."""

    load_url: str
    """URL the load sweep targeted."""
    ready_url: str | None
    """URL polled until the server answered."""
    ready_s: float | None
    """Seconds from start until it answered and its workers held still (None: it never answered)."""
    stop_exit_status: int | None
    """Its exit status after the stop."""
    cpu_at_peak_load: ServiceCpu | None
    """CPU during the highest load level."""
    s001_not_judged: str | None = None
    """Why flat throughput was not called S001 (left out when it was judged)."""
    loop: tuple[LoopSummary, ...] = ()
    """Event loop per server process."""
    workers: ServerWorkers | None = None
    """Worker layout (None when it could not be read)."""


# ---------------------------------------------------------------------------------------------------- the whole
@dataclass(frozen=True, kw_only=True)
class ProfileMetrics(Metrics):
    """Metrics of ``infradoctor profile``."""

    command: ClassVar[str] = "profile"

    workload: ProfileWorkload
    """How the workload ran and ended."""
    headline: ProfileHeadline
    """Key numbers."""
    steps: ProfileSteps
    """Steps and where their time goes."""
    throughput: ProfileThroughput
    """Samples and steps per second."""
    memory: ProfileMemory
    """Memory and its trend."""
    model: ProfileModel
    """Models: calls, call sites, loading, construction, allocations."""
    syncs: tuple[HostSync, ...] = ()
    """Host reads of tensor values by line."""
    dataloader: ProfileDataloader
    """Data loading."""
    h2d: ProfileH2d = field(default_factory=ProfileH2d)
    """Host-to-device copies."""
    precision: ProfilePrecision = field(default_factory=ProfilePrecision)
    """Matmul precision settings."""
    system: ProfileSystem
    """The machine."""
    distributions: ProfileDistributions = field(default_factory=ProfileDistributions)
    """Raw samples."""
    load: LoadMetrics | None = None
    """``--load-url``: the load sweep (the ``load`` command's metrics; null when no load ran)."""
    service: ProfileService | None = None
    """``--load-url``: the server's side (left out, with ``load``, for a plain profile)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: what is not available is left out where the command has always left it out."""
        out = super().to_dict()
        for key in ("headline", "h2d", "precision", "distributions"):
            out[key] = _without_none(out[key])
        if self.service is None:
            del out["load"], out["service"]
            return out
        if out["load"] is not None:
            out["load"]["headline"] = _without_none(out["load"]["headline"])
        service = out["service"]
        if service["s001_not_judged"] is None:
            del service["s001_not_judged"]
        for loop in service["loop"]:
            for stall in loop["stalls"]:
                for frame in (stall["site"], *stall["stack"]):
                    if frame is not None and frame.get("coroutine") is None:
                        frame.pop("coroutine", None)
        return out


def _without_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}

