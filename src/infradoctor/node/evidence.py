"""Evidence gathered from one machine: frozen dataclasses, one docstring line per field.

``None`` in a numeric field means "not available" (the probe could not read it: not supported by this GPU, no
permission, no driver); the reason is kept in :attr:`GpuDevice.unavailable` or in :attr:`NodeEvidence.notes`.
Every class is a :class:`~infradoctor.metrics.Metrics` dataclass: ``to_dict()`` / ``from_dict()`` go through the
type hints, so evidence can be recorded, stored in a result and evaluated again later, and the result schema
describes it.

The GPU classes (:class:`GpuDevice`, :class:`GpuProcess`, :class:`MigDevice`, :class:`GpuWindow`,
:class:`GpuSnapshot`) say what a GPU is, not who read it: NVML, ``nvidia-smi -q -x``, ``nvidia-smi -q`` text and
Prometheus (dcgm-exporter) series all build the same objects, and the rules N001-N012 read only these. A source
that does not have a field leaves it ``None`` (build a device with :meth:`GpuDevice.blank` and set what you have);
a rule never calls a missing field healthy or faulty.

Building them from another source (e.g. dcgm-exporter through Prometheus, one :class:`NodeEvidence` per instance
with ``host=None`` or the node_exporter host, and ``GpuSnapshot(backend="dcgm", source=<query>, ...)``):

- units: bytes (``DCGM_FI_DEV_FB_USED`` is MiB: x 2**20; total = used + free + reserved), watts, MHz, Celsius,
  percent 0-100 (``DCGM_FI_PROF_*`` ratios x 100), seconds (``DCGM_FI_DEV_*_VIOLATION`` are nanoseconds);
- ``clock_event_reasons``: the bitmask (``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``, since DCGM 4
  ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``), same bits as NVML; ``performance_state`` from ``DCGM_FI_DEV_PSTATE``;
- counters read once go in the device (``pcie_replay_count``, ``clock_event_time_s`` keyed ``sw_power_cap``
  (POWER_VIOLATION), ``sw_thermal_slowdown`` (THERMAL_VIOLATION), ``sync_boost``); their growth over the query
  range goes in :class:`GpuWindow` (``pcie_replays`` = ``increase()``; ``clock_event_share`` = increase / range;
  ``throttled_sample_share`` = the share of samples for which
  :func:`~infradoctor.node.rules.n003_gpu_throttling.throttling_reasons` is not empty; utilisation mean/max);
- a blank sentinel (DCGM's 9223372036854775794 and friends) is ``None``, not a reading;
- MIG: one :class:`MigDevice` per ``GPU_I_ID`` with its own memory; processes carry ``gpu_instance_id``;
- Xid: ``DCGM_FI_DEV_XID_ERRORS`` is the last Xid's value, not a count: make one
  :class:`~infradoctor.xid.XidEvent` per change of value, in :class:`KernelLogEvidence`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infradoctor.metrics import Metrics
from infradoctor.xid import XidEvent as XidEvent  # one Xid event type for node and logs


@dataclass(frozen=True)
class Note(Metrics):
    """Something that could not be measured, and why."""

    source: str
    """The probe, e.g. ``gpu.nvml``, ``kernel-log``, ``host.sockets``."""
    message: str
    """Human-readable reason."""


@dataclass(frozen=True)
class CpuEvidence(Metrics):
    """CPU utilisation and run-queue length."""

    logical_cores: int
    """Logical CPUs visible to the OS."""
    usable_cores: int
    """Logical CPUs this process may run on (its affinity mask)."""
    utilization_pct: float | None
    """Whole-machine CPU utilisation over the measurement window, 0-100."""
    per_core_pct: tuple[float, ...]
    """Utilisation of each logical CPU over the window, 0-100."""
    iowait_pct: float | None
    """Share of CPU time waiting for I/O over the window, 0-100 (Linux)."""
    load_1m: float | None
    """1-minute load average (runnable + uninterruptible tasks)."""
    load_5m: float | None
    """5-minute load average."""
    load_15m: float | None
    """15-minute load average."""
    window_s: float
    """Length of the utilisation measurement window in seconds."""


@dataclass(frozen=True)
class MemoryEvidence(Metrics):
    """Host RAM and swap."""

    total_bytes: int
    """Physical memory."""
    available_bytes: int
    """Memory available to new work without swapping (``MemAvailable``)."""
    used_bytes: int
    """Memory in use."""
    swap_total_bytes: int
    """Configured swap."""
    swap_used_bytes: int
    """Swap in use."""
    swap_in_bytes: int | None = None
    """Bytes swapped in since boot (Linux)."""
    swap_out_bytes: int | None = None
    """Bytes swapped out since boot (Linux)."""

    @property
    def available_fraction(self) -> float:
        """Available / total, 0-1."""
        return self.available_bytes / self.total_bytes if self.total_bytes else 1.0

    @property
    def swap_used_fraction(self) -> float:
        """Swap used / swap total, 0-1 (0 without swap)."""
        return self.swap_used_bytes / self.swap_total_bytes if self.swap_total_bytes else 0.0


@dataclass(frozen=True)
class DiskUsage(Metrics):
    """Space on one mounted filesystem that this machine's work uses."""

    mountpoint: str
    """Mount point, e.g. ``/`` or ``/data``."""
    device: str
    """Block device or source, e.g. ``/dev/nvme0n1p1`` or ``overlay``."""
    fstype: str
    """Filesystem type, e.g. ``ext4``."""
    total_bytes: int
    """Capacity available to unprivileged users plus used space."""
    used_bytes: int
    """Used space."""
    free_bytes: int
    """Space free for unprivileged users."""
    inodes_total: int | None = None
    """Inodes on the filesystem (None where the filesystem has no fixed inode table)."""
    inodes_free: int | None = None
    """Free inodes."""
    why: tuple[str, ...] = ()
    """Why this mount counts as in use: ``root``, ``cwd``, ``home``, ``tmp``, ``HF_HOME``, ``mounted`` ..."""

    @property
    def used_fraction(self) -> float:
        """Used / (used + free), as ``df`` reports it, 0-1."""
        denominator = self.used_bytes + self.free_bytes
        return self.used_bytes / denominator if denominator else 0.0

    @property
    def inodes_used_fraction(self) -> float | None:
        """Inodes used / total, 0-1, or None."""
        if not self.inodes_total or self.inodes_free is None:
            return None
        return (self.inodes_total - self.inodes_free) / self.inodes_total


@dataclass(frozen=True)
class FdEvidence(Metrics):
    """Open file descriptors against their limits."""

    process_open: int | None
    """File descriptors open in this process."""
    process_soft_limit: int | None
    """This process's soft ``RLIMIT_NOFILE`` (``ulimit -n``)."""
    process_hard_limit: int | None
    """Its hard limit."""
    system_allocated: int | None
    """File handles allocated system-wide (first field of /proc/sys/fs/file-nr)."""
    system_max: int | None
    """System-wide maximum (/proc/sys/fs/file-max)."""


@dataclass(frozen=True)
class SocketEvidence(Metrics):
    """TCP sockets by state and the ephemeral port range."""

    tcp_by_state: Mapping[str, int]
    """Count of TCP sockets (IPv4 and IPv6) per state, e.g. ``{"ESTABLISHED": 40, "TIME_WAIT": 12000}``."""
    ephemeral_low: int | None
    """First port of the ephemeral range (/proc/sys/net/ipv4/ip_local_port_range)."""
    ephemeral_high: int | None
    """Last port of the ephemeral range."""
    ephemeral_ports_in_use: int
    """Distinct local ports inside the ephemeral range held by non-listening TCP sockets."""

    @property
    def time_wait(self) -> int:
        """Sockets in TIME_WAIT."""
        return int(self.tcp_by_state.get("TIME_WAIT", 0))

    @property
    def ephemeral_range_size(self) -> int | None:
        """Number of ports in the ephemeral range."""
        if self.ephemeral_low is None or self.ephemeral_high is None:
            return None
        return self.ephemeral_high - self.ephemeral_low + 1


@dataclass(frozen=True)
class ProcessSample(Metrics):
    """One process among the busiest."""

    pid: int
    """Process id."""
    name: str
    """Process name."""
    username: str | None
    """Owner, when readable."""
    cpu_pct: float
    """CPU use over the measurement window, percent of one core (may exceed 100)."""
    rss_bytes: int
    """Resident memory."""
    threads: int | None = None
    """Thread count."""


@dataclass(frozen=True)
class HostEvidence(Metrics):
    """Everything the host probe read through psutil and /proc."""

    hostname: str
    """Host name."""
    cpu: CpuEvidence
    """CPU utilisation and load."""
    memory: MemoryEvidence
    """RAM and swap."""
    disks: tuple[DiskUsage, ...]
    """Filesystems in use."""
    fds: FdEvidence
    """File descriptors."""
    sockets: SocketEvidence | None
    """TCP sockets, or None when not readable."""
    top_cpu: tuple[ProcessSample, ...]
    """Busiest processes by CPU, most first."""
    top_rss: tuple[ProcessSample, ...]
    """Largest processes by resident memory, most first."""
    uptime_s: float | None = None
    """Seconds since boot."""


@dataclass(frozen=True)
class EccCounts(Metrics):
    """ECC error counters of one GPU (sum over memory locations)."""

    volatile_corrected: int | None
    """Corrected errors since the driver loaded."""
    volatile_uncorrected: int | None
    """Uncorrected errors since the driver loaded."""
    aggregate_corrected: int | None
    """Corrected errors over the GPU's lifetime."""
    aggregate_uncorrected: int | None
    """Uncorrected errors over the GPU's lifetime."""


PROCESS_KINDS = ("compute", "graphics", "compute+graphics")
"""Values of :attr:`GpuProcess.kind` (nvidia-smi's ``C``, ``G`` and ``C+G``)."""


@dataclass(frozen=True)
class GpuProcess(Metrics):
    """A process with a context on a GPU."""

    pid: int
    """Process id (in the driver's PID namespace)."""
    name: str | None
    """Process name, when known."""
    used_memory_bytes: int | None
    """GPU memory the process holds; None where the driver does not report it (Windows WDDM, some vGPU guests)."""
    kind: str = "compute"
    """``compute``, ``graphics`` or ``compute+graphics`` (a desktop application under WDDM is usually the last)."""
    gpu_instance_id: int | None = None
    """MIG GPU instance the process runs in (None without MIG)."""
    compute_instance_id: int | None = None
    """MIG compute instance inside that GPU instance (None without MIG)."""


@dataclass(frozen=True)
class MigDevice(Metrics):
    """One MIG device (a GPU instance and compute instance) of a GPU in MIG mode: its own slice of memory."""

    index: int
    """MIG device index on its GPU (nvidia-smi's ``MIG Device`` index)."""
    gpu_instance_id: int | None
    """GPU instance id (``GI``)."""
    compute_instance_id: int | None
    """Compute instance id (``CI``) inside the GPU instance."""
    memory_used_bytes: int | None
    """Memory used in this instance's slice."""
    memory_total_bytes: int | None
    """Memory of this instance's slice."""
    multiprocessor_count: int | None = None
    """SMs in the slice."""
    uuid: str | None = None
    """``MIG-...`` UUID, when known."""

    @property
    def memory_used_fraction(self) -> float | None:
        """Used / total of the slice, 0-1."""
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes

    def label(self, gpu: GpuDevice) -> str:
        """``GPU 0 MIG 2 (GI 3, CI 0)``: how findings name a MIG device."""
        ids = [f"GI {self.gpu_instance_id}" if self.gpu_instance_id is not None else "",
               f"CI {self.compute_instance_id}" if self.compute_instance_id is not None else ""]
        inner = ", ".join(i for i in ids if i)
        return f"GPU {gpu.index} MIG {self.index}" + (f" ({inner})" if inner else "")


@dataclass(frozen=True)
class GpuWindow(Metrics):
    """How one GPU moved over an observation window: a ``--watch``, or a fleet query's time range.

    A single snapshot has no window (``GpuDevice.window`` is None): counters read once tell the history since the
    driver loaded, not the present. Over a window their growth says what happened while it was watched.
    """

    seconds: float
    """Length of the window."""
    samples: int = 0
    """Samples of the instantaneous values in the window (0 when only counters were compared)."""
    utilization_gpu_mean_pct: float | None = None
    """Mean GPU utilisation over the samples, 0-100."""
    utilization_gpu_max_pct: float | None = None
    """Highest sampled GPU utilisation, 0-100."""
    throttled_sample_share: float | None = None
    """Share of samples judged throttled, 0-1: by N003's ``throttling_reasons`` (a fault bit, or the power-cap bit
    while the GPU works below its top clock), not any non-benign bit: idle GPUs show the power-cap bit at P8."""
    clock_event_share: Mapping[str, float] = field(default_factory=dict)
    """Reason name -> share of the window it held the clocks down, 0-1, from the growth of its time counter."""
    pcie_replays: int | None = None
    """Growth of the PCIe replay counter over the window (link-level retransmissions)."""


@dataclass(frozen=True)
class GpuDevice(Metrics):
    """One GPU, whoever read it (NVML, nvidia-smi XML or text, Prometheus)."""

    index: int
    """Enumeration index (nvidia-smi order)."""
    name: str | None
    """Product name, e.g. ``NVIDIA H100 80GB HBM3``."""
    uuid: str | None
    """``GPU-...`` UUID."""
    pci_bus_id: str | None
    """PCI bus id, e.g. ``00000000:3B:00.0``."""
    utilization_gpu_pct: float | None
    """Share of time a kernel ran over the last sample period, 0-100 (None under MIG: per instance only)."""
    utilization_memory_pct: float | None
    """Share of time device memory was read or written, 0-100."""
    memory_used_bytes: int | None
    """Framebuffer memory used."""
    memory_total_bytes: int | None
    """Framebuffer memory total."""
    temperature_c: float | None
    """Core temperature in Celsius."""
    power_draw_w: float | None
    """Power draw in watts."""
    power_limit_w: float | None
    """Enforced power limit in watts."""
    sm_clock_mhz: int | None
    """Current SM clock."""
    max_sm_clock_mhz: int | None
    """Maximum SM clock."""
    mem_clock_mhz: int | None
    """Current memory clock."""
    max_mem_clock_mhz: int | None
    """Maximum memory clock."""
    clock_event_reasons: int | None
    """Bitmask of active clock event (throttle) reasons, NVML ``nvmlClocksEventReason*`` bits."""
    ecc_enabled: bool | None
    """Current ECC mode."""
    ecc: EccCounts
    """ECC counters."""
    retired_pages_single_bit: int | None
    """Pages retired after multiple single-bit errors (pre-Ampere)."""
    retired_pages_double_bit: int | None
    """Pages retired after a double-bit error (pre-Ampere)."""
    retired_pages_pending: bool | None
    """A page retirement waits for the next GPU reset (pre-Ampere)."""
    remapped_rows_correctable: int | None
    """Rows remapped after correctable errors (Ampere and later)."""
    remapped_rows_uncorrectable: int | None
    """Rows remapped after uncorrectable errors."""
    remapped_rows_pending: bool | None
    """A row remap waits for the next GPU reset."""
    remapped_rows_failure: bool | None
    """A row remap failed: the GPU has run out of spare rows."""
    pcie_gen_current: int | None
    """Current PCIe link generation."""
    pcie_gen_max: int | None
    """Highest PCIe generation the link can run: the lower of the device's and the host's maximum."""
    pcie_width_current: int | None
    """Current PCIe link width (lanes)."""
    pcie_width_max: int | None
    """Maximum PCIe width of the device (what the slot wires may be fewer)."""
    pcie_replay_count: int | None
    """PCIe replay counter since the driver loaded (link-level retransmissions)."""
    persistence_mode: bool | None
    """Persistence mode enabled."""
    mig_enabled: bool | None
    """MIG mode currently enabled (None where the GPU has no MIG)."""
    processes: tuple[GpuProcess, ...] = ()
    """Processes with a context on this GPU."""
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """Fields that could not be read, with the reason (e.g. ``{"remapped_rows": "Not Supported"}``)."""
    performance_state: int | None = None
    """Performance state: 0 (P0, full clocks) to 15; P8 and above are idle states."""
    pcie_gen_max_device: int | None = None
    """Highest PCIe generation the GPU itself supports."""
    pcie_gen_max_host: int | None = None
    """Highest PCIe generation the host's slot or root port supports."""
    clock_event_time_s: Mapping[str, float] = field(default_factory=dict)
    """Reason name -> seconds it held the clocks down since the driver loaded (cumulative counters)."""
    virtualization_mode: str | None = None
    """``none`` (bare metal), ``pass-through``, ``vgpu`` (a vGPU guest), ``host-vgpu`` or ``host-vsga``."""
    driver_model: str | None = None
    """Windows driver model: ``WDDM``, ``TCC`` or ``MCDM`` (None on Linux)."""
    mig_devices: tuple[MigDevice, ...] = ()
    """MIG devices of a GPU in MIG mode, each with its own memory."""
    window: GpuWindow | None = None
    """How the GPU moved over an observation window (``--watch`` or a fleet range); None for one snapshot."""

    @property
    def memory_used_fraction(self) -> float | None:
        """Used / total framebuffer, 0-1."""
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes

    @property
    def label(self) -> str:
        """``GPU 3 (00000000:3B:00.0)``: how findings name a GPU."""
        return f"GPU {self.index}" + (f" ({self.pci_bus_id})" if self.pci_bus_id else "")

    @classmethod
    def blank(cls, index: int, unavailable: Mapping[str, str] | None = None, **fields: Any) -> GpuDevice:
        """A GPU with every field not available except ``fields``: how a source with few fields builds one."""
        values: dict[str, Any] = {
            "name": None, "uuid": None, "pci_bus_id": None, "utilization_gpu_pct": None,
            "utilization_memory_pct": None, "memory_used_bytes": None, "memory_total_bytes": None,
            "temperature_c": None, "power_draw_w": None, "power_limit_w": None, "sm_clock_mhz": None,
            "max_sm_clock_mhz": None, "mem_clock_mhz": None, "max_mem_clock_mhz": None, "clock_event_reasons": None,
            "ecc_enabled": None, "ecc": EccCounts(None, None, None, None), "retired_pages_single_bit": None,
            "retired_pages_double_bit": None, "retired_pages_pending": None, "remapped_rows_correctable": None,
            "remapped_rows_uncorrectable": None, "remapped_rows_pending": None, "remapped_rows_failure": None,
            "pcie_gen_current": None, "pcie_gen_max": None, "pcie_width_current": None, "pcie_width_max": None,
            "pcie_replay_count": None, "persistence_mode": None, "mig_enabled": None,
        }
        values.update(fields)
        return cls(index=index, unavailable=dict(unavailable or {}), **values)


@dataclass(frozen=True)
class GpuSnapshot(Metrics):
    """What the GPU backend saw."""

    backend: str
    """``nvml``, ``smi`` (an nvidia-smi report), ``none``, or another source's name (e.g. ``dcgm``)."""
    source: str
    """Where it came from: ``libnvidia-ml``, ``nvidia-smi -q -x``, a recorded file's path, or why none."""
    driver_version: str | None
    """Driver version, e.g. ``550.90.07``."""
    cuda_version: str | None
    """CUDA version the driver supports, e.g. ``12.4``."""
    devices: tuple[GpuDevice, ...]
    """GPUs, in index order."""
    available: bool
    """False when no backend could talk to a driver (then ``devices`` is empty)."""
    attached_gpus: int | None = None
    """GPUs the driver says are attached, where the source says it (a report may list fewer)."""


@dataclass(frozen=True)
class KernelLogEvidence(Metrics):
    """GPU events from the kernel ring buffer or log file."""

    source: str | None
    """``dmesg``, ``journalctl -k``, a file path, or None when nothing was readable."""
    lines_read: int
    """Lines scanned."""
    xid_events: tuple[XidEvent, ...]
    """Xid events, oldest first (bounded)."""
    xid_events_total: int = 0
    """All Xid lines seen, also those beyond the kept bound."""
    tried: tuple[str, ...] = ()
    """Sources tried, each with the reason it was skipped."""


@dataclass(frozen=True)
class GpuExpectation(Metrics):
    """Signs that this machine should have a visible GPU."""

    cuda_visible_devices: str | None
    """``CUDA_VISIBLE_DEVICES`` as set (None when unset)."""
    device_nodes: tuple[str, ...]
    """``/dev/nvidia[0-9]*`` device nodes present."""
    driver_loaded: bool
    """The ``nvidia`` kernel module is loaded (/proc/modules or /proc/driver/nvidia/version)."""
    driver_version_file: str | None
    """First line of /proc/driver/nvidia/version, when present."""

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why a GPU is expected (empty: not expected)."""
        out: list[str] = []
        visible = (self.cuda_visible_devices or "").strip()
        if visible and visible not in ("-1", "none", "NoDevFiles"):
            out.append(f"CUDA_VISIBLE_DEVICES={visible}")
        if self.device_nodes:
            more = "..." if len(self.device_nodes) > 4 else ""
            out.append("device nodes " + ", ".join(self.device_nodes[:4]) + more)
        if self.driver_loaded:
            out.append("nvidia kernel module loaded")
        return tuple(out)


@dataclass(frozen=True)
class MetricSummary(Metrics):
    """Summary of one sampled metric over a watch."""

    count: int
    """Samples with a value."""
    min: float
    """Smallest value."""
    mean: float
    """Arithmetic mean."""
    p95: float
    """95th percentile (nearest rank)."""
    max: float
    """Largest value."""


@dataclass(frozen=True)
class WatchSummary(Metrics):
    """What ``--watch`` saw over time."""

    samples: int
    """Samples taken."""
    interval_s: float
    """Requested interval between samples."""
    elapsed_s: float
    """Time from first to last sample."""
    interrupted: bool
    """True when the user stopped it (Ctrl-C) before the duration ended."""
    metrics: Mapping[str, MetricSummary]
    """Per metric (``cpu_util_pct``, ``gpu0_util_pct`` ...): min, mean, p95, max."""


@dataclass(frozen=True)
class NodeEvidence(Metrics):
    """Everything ``infradoctor node`` gathered; rules read only this."""

    host: HostEvidence | None
    """Host probe, or None when it was skipped (evaluating recorded GPU evidence only)."""
    gpu: GpuSnapshot
    """GPU probe."""
    kernel: KernelLogEvidence
    """Kernel log probe."""
    expectation: GpuExpectation
    """Signs that a GPU should be visible."""
    watch: WatchSummary | None = None
    """Sampled metrics when ``--watch`` ran."""
    notes: tuple[Note, ...] = ()
    """What could not be measured, and why."""
