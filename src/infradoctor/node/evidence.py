"""Evidence gathered from one machine: frozen dataclasses, one docstring line per field.

``None`` in a numeric field means "not available" (the probe could not read it: not supported by this GPU, no
permission, no driver); the reason is kept in :attr:`GpuDevice.unavailable` or in :attr:`NodeEvidence.notes`.
Every class has ``to_dict`` / ``from_dict`` so that evidence can be recorded and evaluated again later.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from infradoctor.xid import XidEvent as XidEvent  # one Xid event type for node and logs

T = TypeVar("T")


@dataclass(frozen=True)
class Note:
    """Something that could not be measured, and why."""

    source: str
    """The probe, e.g. ``gpu.nvml``, ``kernel-log``, ``host.sockets``."""
    message: str
    """Human-readable reason."""


@dataclass(frozen=True)
class CpuEvidence:
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
class MemoryEvidence:
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
class DiskUsage:
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
class FdEvidence:
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
class SocketEvidence:
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
class ProcessSample:
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
class HostEvidence:
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
class EccCounts:
    """ECC error counters of one GPU (sum over memory locations)."""

    volatile_corrected: int | None
    """Corrected errors since the driver loaded."""
    volatile_uncorrected: int | None
    """Uncorrected errors since the driver loaded."""
    aggregate_corrected: int | None
    """Corrected errors over the GPU's lifetime."""
    aggregate_uncorrected: int | None
    """Uncorrected errors over the GPU's lifetime."""


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU."""

    pid: int
    """Process id (in the driver's PID namespace)."""
    name: str | None
    """Process name, when known."""
    used_memory_bytes: int | None
    """GPU memory the process holds; None where the driver does not report it."""
    kind: str = "compute"
    """``compute`` or ``graphics``."""


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as NVML or nvidia-smi reports it."""

    index: int
    """Enumeration index (nvidia-smi order)."""
    name: str | None
    """Product name, e.g. ``NVIDIA H100 80GB HBM3``."""
    uuid: str | None
    """``GPU-...`` UUID."""
    pci_bus_id: str | None
    """PCI bus id, e.g. ``00000000:3B:00.0``."""
    utilization_gpu_pct: float | None
    """Share of time a kernel ran over the last sample period, 0-100."""
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
    """Maximum PCIe generation this device and slot support."""
    pcie_width_current: int | None
    """Current PCIe link width (lanes)."""
    pcie_width_max: int | None
    """Maximum PCIe width this device and slot support."""
    pcie_replay_count: int | None
    """PCIe replay counter (link-level retransmissions)."""
    persistence_mode: bool | None
    """Persistence mode enabled."""
    mig_enabled: bool | None
    """MIG mode currently enabled (None where the GPU has no MIG)."""
    processes: tuple[GpuProcess, ...] = ()
    """Processes holding memory on this GPU."""
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """Fields that could not be read, with the reason (e.g. ``{"remapped_rows": "Not Supported"}``)."""

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


@dataclass(frozen=True)
class GpuSnapshot:
    """What the GPU backend saw."""

    backend: str
    """``nvml``, ``smi`` (nvidia-smi XML) or ``none``."""
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


@dataclass(frozen=True)
class KernelLogEvidence:
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
class GpuExpectation:
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
class MetricSummary:
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
class WatchSummary:
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
class NodeEvidence:
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


def to_dict(value: Any) -> dict[str, Any]:
    """A dataclass as plain JSON types (tuples become lists)."""
    out: dict[str, Any] = dataclasses.asdict(value)
    return out


def from_dict(cls: type[T], data: Any) -> T:
    """Rebuild a (nested) evidence dataclass from :func:`to_dict` output; unknown keys are ignored."""
    return typing.cast(T, _build(cls, data))


def _build(tp: Any, data: Any) -> Any:
    if data is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        for option in options:
            try:
                return _build(option, data)
            except (TypeError, ValueError, KeyError):
                continue
        raise TypeError(f"cannot read {data!r} as {tp}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(data, Mapping):
            raise TypeError(f"expected an object for {tp.__name__}, got {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        kwargs = {f.name: _build(hints[f.name], data[f.name]) for f in dataclasses.fields(tp) if f.name in data}
        return tp(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(data, (list, tuple)):
            raise TypeError(f"expected a list, got {type(data).__name__}")
        return tuple(_build(args[0], item) for item in data)
    if origin in (Mapping, dict) or tp is dict:
        args = typing.get_args(tp)
        if not isinstance(data, Mapping):
            raise TypeError(f"expected an object, got {type(data).__name__}")
        value_type = args[1] if len(args) == 2 else Any
        return {str(k): _build(value_type, v) for k, v in data.items()}
    if tp is Any:
        return data
    if tp is bool:
        if not isinstance(data, bool):
            raise TypeError(f"expected a boolean, got {data!r}")
        return data
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise TypeError(f"expected an integer, got {data!r}")
        return data
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise TypeError(f"expected a number, got {data!r}")
        return float(data)
    if tp is str:
        if not isinstance(data, str):
            raise TypeError(f"expected a string, got {data!r}")
        return data
    return data
