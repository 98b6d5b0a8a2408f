"""GPU state through NVML (nvidia-ml-py's ``pynvml``), the library nvidia-smi itself is built on.

Every NVML call goes through one query helper, :class:`NvmlQuery` (``nvml_query(func, *args, default=NA)``), which
maps every ``NVMLError`` (Not Supported, Insufficient Permissions, GPU is lost, library not found ...) and functions
missing from the installed nvidia-ml-py to "not available" and remembers the reason. Each probe method names the
``nvidia-smi`` field it corresponds to.

The same code runs on recorded NVML values: :class:`ReplayNvml` answers the ``pynvml`` calls from a record (the
value shapes pynvml returns: ints, strings, structs as objects, lists), and :class:`RecordingNvml` wraps the real
library to write such a record on a machine with GPUs (``infradoctor node --save-nvml-record FILE``).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Final, TypeVar

from infradoctor.bounded import load_json, read_float, read_int
from infradoctor.node.evidence import EccCounts, GpuDevice, GpuProcess, GpuSnapshot, MigDevice, Note
from infradoctor.node.gpu.base import GpuBackend, GpuProbe, unavailable_snapshot

T = TypeVar("T")

RECORD_FORMAT = "infradoctor.nvml-record/1"
"""``format`` field of a recorded-NVML JSON document."""

# NVML constants (stable C ABI values), spelled here so that replay works without loading libnvidia-ml.
NVML_TEMPERATURE_GPU: Final = 0
NVML_CLOCK_GRAPHICS: Final = 0
NVML_CLOCK_SM: Final = 1
NVML_CLOCK_MEM: Final = 2
NVML_MEMORY_ERROR_TYPE_CORRECTED: Final = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED: Final = 1
NVML_VOLATILE_ECC: Final = 0
NVML_AGGREGATE_ECC: Final = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: Final = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: Final = 1
NVML_MEMORY_V2: Final = 0x02000028
"""``nvmlMemory_v2``: version tag of the v2 memory-info struct (its size | 2 << 24)."""


class NotAvailable:
    """The "not available" value: falsy, prints as ``N/A``; there is one instance, :data:`NA`."""

    _instance: NotAvailable | None = None

    def __new__(cls) -> NotAvailable:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "N/A"


NA: Final = NotAvailable()
"""Returned by :class:`NvmlQuery` when a value cannot be read."""


def load_pynvml() -> ModuleType | None:
    """The ``pynvml`` module of nvidia-ml-py, or None when it is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    module: ModuleType = pynvml
    return module


def _nvml_error_class() -> type[BaseException]:
    module = load_pynvml()
    if module is None:
        return _NoNvmlError
    cls: type[BaseException] = module.NVMLError
    return cls


class _NoNvmlError(Exception):
    """Stands in for NVMLError when nvidia-ml-py is not installed."""


class NvmlQuery:
    """The one NVML query helper: ``nvml_query(func, *args, default=NA)``.

    ``func`` is the name of a ``pynvml`` function (resolved on the library this helper wraps: the real ``pynvml``
    module, or a :class:`ReplayNvml`). Every ``NVMLError`` and a function missing from the installed nvidia-ml-py
    become ``default``; the reason stays in :attr:`last_reason`, and each function that failed is remembered once
    in :attr:`failures`.
    """

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        """The library: ``pynvml`` or a replay."""
        self.failures: dict[str, str] = {}
        """Function name -> first failure reason, for the result's notes."""
        self.last_reason: str | None = None
        """Why the latest call returned the default (None after a success)."""
        self._error_class = _nvml_error_class()

    def __call__(self, func: str, *args: Any, default: Any = NA) -> Any:
        fn: Callable[..., Any] | None = getattr(self.lib, func, None)
        if fn is None:
            return self._fail(func, "function not in this nvidia-ml-py", default)
        try:
            value = fn(*args)
        except self._error_class as exc:
            return self._fail(func, str(exc) or type(exc).__name__, default)
        self.last_reason = None
        return value

    def _fail(self, func: str, reason: str, default: Any) -> Any:
        self.last_reason = reason
        self.failures.setdefault(func, reason)
        return default


MAX_GPUS = 64
"""GPUs read at most (a count beyond it is a broken driver or record, not a machine)."""
MAX_PROCESSES = 256
"""Processes read per GPU."""
MAX_MIG_DEVICES = 32
"""MIG devices read per GPU (a GPU has at most 7 today)."""
MAX_TEXT_CHARS = 512
"""Characters kept of a name or id."""
MAX_UINT64 = 2**64 - 1
NO_MIG_INSTANCE = 0xFFFFFFFF
"""``gpuInstanceId`` / ``computeInstanceId`` of a process on a GPU without MIG."""
NVML_PERF_POLICY_POWER: Final = 0
NVML_PERF_POLICY_THERMAL: Final = 1
NVML_PERF_POLICY_SYNC_BOOST: Final = 2
VIOLATION_REASONS = ((NVML_PERF_POLICY_POWER, "sw_power_cap"), (NVML_PERF_POLICY_THERMAL, "sw_thermal_slowdown"),
                     (NVML_PERF_POLICY_SYNC_BOOST, "sync_boost"))
"""``nvmlDeviceGetViolationStatus`` policies and the clock event reasons whose time they count (nanoseconds)."""
VIRTUALIZATION_MODES = {0: "none", 1: "pass-through", 2: "vgpu", 3: "host-vgpu", 4: "host-vsga"}
"""``nvmlDeviceGetVirtualizationMode`` values."""
DRIVER_MODELS = {0: "WDDM", 1: "TCC", 2: "MCDM"}
"""``nvmlDeviceGetDriverModel`` values (Windows only)."""
MALFORMED = "malformed value in the NVML answer"
"""The reason kept for a value of the wrong type or out of range (a broken record, never a real driver)."""


def _na(value: Any) -> bool:
    return value is NA or value is None


def _whole(value: Any, low: int = 0, high: int = MAX_UINT64) -> int | None:
    """An integer NVML answer within range (not a bool, not text); else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def _real(value: Any, low: float = 0.0, high: float = float(MAX_UINT64)) -> float | None:
    """A finite number within range; else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return read_float(value, low=low, high=high)


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    return value[:MAX_TEXT_CHARS]


def _items(value: Any, limit: int) -> list[Any] | None:
    """The first ``limit`` items of a list answer (pynvml returns lists and ctypes arrays); else None."""
    if isinstance(value, (list, tuple)):
        return list(value[:limit])
    return None


class _DeviceReader:
    """Reads one GPU through the query helper and keeps the reason for each field it could not read.

    Every answer is typed and bounded before use: a value of the wrong type or out of range (a hand-edited or
    corrupted record) is "not available" with the reason :data:`MALFORMED`, never an exception.
    """

    def __init__(self, query: NvmlQuery, handle: Any) -> None:
        self.q = query
        self.h = handle
        self.unavailable: dict[str, str] = {}

    def get(self, field: str, func: str, *args: Any) -> Any:
        value = self.q(func, self.h, *args)
        if value is NA:
            self.unavailable.setdefault(field, self.q.last_reason or "not available")
        return value

    def typed(self, field: str, raw: Any, value: T) -> T:
        """``value`` (``raw`` converted); a conversion that failed on a present answer is noted as malformed."""
        if value is None and not _na(raw):
            self.unavailable.setdefault(field, MALFORMED)
        return value

    def whole(self, field: str, func: str, *args: Any, high: int = MAX_UINT64) -> int | None:
        raw = self.get(field, func, *args)
        return self.typed(field, raw, _whole(raw, high=high))

    def attr(self, obj: Any, name: str) -> Any:
        return None if _na(obj) else getattr(obj, name, None)

    def name(self) -> str | None:
        """``nvidia-smi --query-gpu=name`` (``<product_name>``)."""
        raw = self.get("name", "nvmlDeviceGetName")
        return self.typed("name", raw, _text(raw))

    def uuid(self) -> str | None:
        """``nvidia-smi --query-gpu=uuid`` (``<uuid>``)."""
        raw = self.get("uuid", "nvmlDeviceGetUUID")
        return self.typed("uuid", raw, _text(raw))

    def pci_bus_id(self) -> str | None:
        """``nvidia-smi --query-gpu=pci.bus_id`` (``<pci><pci_bus_id>``)."""
        info = self.get("pci_bus_id", "nvmlDeviceGetPciInfo")
        raw = self.attr(info, "busId")
        return self.typed("pci_bus_id", raw, _text(raw))

    def utilization(self) -> tuple[float | None, float | None]:
        """``nvidia-smi --query-gpu=utilization.gpu,utilization.memory`` (``<utilization>``)."""
        rates = self.get("utilization", "nvmlDeviceGetUtilizationRates")
        gpu, memory = self.attr(rates, "gpu"), self.attr(rates, "memory")
        return (self.typed("utilization", gpu, _real(gpu, high=100.0)),
                self.typed("utilization", memory, _real(memory, high=100.0)))

    def memory(self, *, v2: bool = True) -> tuple[int | None, int | None]:
        """``nvidia-smi --query-gpu=memory.used,memory.total`` (``<fb_memory_usage>``), in bytes.

        The v2 query (driver R510 and later) leaves the driver's reserved memory out of "used", as nvidia-smi
        does; older drivers (and MIG device handles) answer only the v1 query, whose "used" includes it.
        """
        info = self.q("nvmlDeviceGetMemoryInfo", self.h, NVML_MEMORY_V2) if v2 else NA
        if info is NA:
            self.q.failures.pop("nvmlDeviceGetMemoryInfo", None)
            info = self.get("memory", "nvmlDeviceGetMemoryInfo")
        used, total = self.attr(info, "used"), self.attr(info, "total")
        return self.typed("memory", used, _whole(used)), self.typed("memory", total, _whole(total))

    def temperature(self) -> float | None:
        """``nvidia-smi --query-gpu=temperature.gpu`` (``<temperature><gpu_temp>``)."""
        raw = self.get("temperature", "nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)
        return self.typed("temperature", raw, _real(raw, low=-100.0, high=300.0))

    def power(self) -> tuple[float | None, float | None]:
        """``nvidia-smi --query-gpu=power.draw,enforced.power.limit`` (``<gpu_power_readings>``), in watts."""
        draw = self.whole("power_draw", "nvmlDeviceGetPowerUsage", high=10**8)
        limit = self.whole("power_limit", "nvmlDeviceGetEnforcedPowerLimit", high=10**8)
        return (None if draw is None else draw / 1000.0), (None if limit is None else limit / 1000.0)

    def clocks(self) -> tuple[int | None, int | None, int | None, int | None]:
        """``nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem`` (``<clocks>``)."""
        return (
            self.whole("sm_clock", "nvmlDeviceGetClockInfo", NVML_CLOCK_SM, high=100_000),
            self.whole("max_sm_clock", "nvmlDeviceGetMaxClockInfo", NVML_CLOCK_SM, high=100_000),
            self.whole("mem_clock", "nvmlDeviceGetClockInfo", NVML_CLOCK_MEM, high=100_000),
            self.whole("max_mem_clock", "nvmlDeviceGetMaxClockInfo", NVML_CLOCK_MEM, high=100_000),
        )

    def clock_event_reasons(self) -> int | None:
        """``nvidia-smi --query-gpu=clocks_event_reasons.active`` (``<clocks_event_reasons>``).

        Older drivers and nvidia-ml-py call them ``clocks_throttle_reasons``.
        """
        value = self.q("nvmlDeviceGetCurrentClocksEventReasons", self.h)
        if value is NA:
            value = self.get("clock_event_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
        return self.typed("clock_event_reasons", value, _whole(value))

    def clock_event_times(self) -> dict[str, float]:
        """``nvidia-smi -q -d PERFORMANCE`` counters: seconds each policy held the clocks since the driver loaded.

        ``nvmlDeviceGetViolationStatus`` (power, thermal, sync boost; nanoseconds).
        """
        out: dict[str, float] = {}
        for policy, reason in VIOLATION_REASONS:
            status = self.q("nvmlDeviceGetViolationStatus", self.h, policy)
            nanoseconds = _whole(self.attr(status, "violationTime"))
            if nanoseconds is not None:
                out[reason] = round(nanoseconds / 1e9, 6)
        return out

    def ecc_enabled(self) -> bool | None:
        """``nvidia-smi --query-gpu=ecc.mode.current`` (``<ecc_mode><current_ecc>``)."""
        mode = self.get("ecc_mode", "nvmlDeviceGetEccMode")
        pair = _items(mode, 2)
        current = _whole(pair[0], high=1) if pair else None
        return self.typed("ecc_mode", mode, None if current is None else bool(current))

    def ecc_counts(self) -> EccCounts:
        """``nvidia-smi --query-gpu=ecc.errors.{corrected,uncorrected}.{volatile,aggregate}.total``.

        In the XML: ``<ecc_errors><volatile|aggregate>``.
        """

        def count(error_type: int, counter: int, field: str) -> int | None:
            return self.whole(field, "nvmlDeviceGetTotalEccErrors", error_type, counter)

        return EccCounts(
            volatile_corrected=count(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, "ecc_volatile"),
            volatile_uncorrected=count(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, "ecc_volatile"),
            aggregate_corrected=count(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC, "ecc_aggregate"),
            aggregate_uncorrected=count(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, "ecc_aggregate"),
        )

    def retired_pages(self) -> tuple[int | None, int | None, bool | None]:
        """``nvidia-smi --query-retired-pages`` / ``-q -d PAGE_RETIREMENT`` (``<retired_pages>``): pre-Ampere GPUs."""
        single = self.get("retired_pages", "nvmlDeviceGetRetiredPages",
                          NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        double = self.get("retired_pages", "nvmlDeviceGetRetiredPages", NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = self.get("retired_pages", "nvmlDeviceGetRetiredPagesPendingStatus")

        def pages(raw: Any) -> int | None:
            return self.typed("retired_pages", raw, None if (items := _items(raw, 1 << 16)) is None else len(items))

        state = _whole(pending, high=1)
        return pages(single), pages(double), self.typed("retired_pages", pending,
                                                         None if state is None else bool(state))

    def remapped_rows(self) -> tuple[int | None, int | None, bool | None, bool | None]:
        """``nvidia-smi --query-remapped-rows`` / ``-q -d ROW_REMAPPER`` (``<remapped_rows>``): Ampere and later."""
        rows = self.get("remapped_rows", "nvmlDeviceGetRemappedRows")
        items = _items(rows, 4)
        values = [_whole(v) for v in items] if items is not None and len(items) == 4 else None
        if values is None or None in values:
            self.typed("remapped_rows", rows, None)
            return None, None, None, None
        correctable, uncorrectable, pending, failure = values
        return correctable, uncorrectable, bool(pending), bool(failure)

    def pcie(self) -> tuple[int | None, int | None, int | None, int | None]:
        """``nvidia-smi --query-gpu=pcie.link.{gen,width}.{current,max}`` (``<pci><pci_gpu_link_info>``)."""
        return (
            self.whole("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration", high=64),
            self.whole("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", high=64),
            self.whole("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth", high=64),
            self.whole("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", high=64),
        )

    def pcie_gen_max_device(self) -> int | None:
        """``<pcie_gen><max_device_link_gen>``: the GPU's own highest generation."""
        return _whole(self.q("nvmlDeviceGetGpuMaxPcieLinkGeneration", self.h), high=64)

    def pcie_replay_count(self) -> int | None:
        """``nvidia-smi -q`` ``<pci><replay_counter>``."""
        return self.whole("pcie_replay_count", "nvmlDeviceGetPcieReplayCounter")

    def persistence_mode(self) -> bool | None:
        """``nvidia-smi --query-gpu=persistence_mode`` (``<persistence_mode>``)."""
        value = self.whole("persistence_mode", "nvmlDeviceGetPersistenceMode", high=1)
        return None if value is None else bool(value)

    def performance_state(self) -> int | None:
        """``nvidia-smi --query-gpu=pstate`` (``<performance_state>``); 32 (unknown) is None."""
        return _whole(self.q("nvmlDeviceGetPerformanceState", self.h), high=15)

    def virtualization_mode(self) -> str | None:
        """``<gpu_virtualization_mode><virtualization_mode>``."""
        value = _whole(self.q("nvmlDeviceGetVirtualizationMode", self.h), high=64)
        return None if value is None else VIRTUALIZATION_MODES.get(value)

    def driver_model(self) -> str | None:
        """``nvidia-smi --query-gpu=driver_model.current`` (Windows only; Linux answers Not Supported)."""
        pair = _items(self.q("nvmlDeviceGetDriverModel", self.h), 2)
        current = _whole(pair[0], high=64) if pair else None
        return None if current is None else DRIVER_MODELS.get(current)

    def mig_enabled(self) -> bool | None:
        """``nvidia-smi --query-gpu=mig.mode.current`` (``<mig_mode><current_mig>``); None on GPUs without MIG."""
        mode = self.get("mig_mode", "nvmlDeviceGetMigMode")
        pair = _items(mode, 2)
        current = _whole(pair[0], high=1) if pair else None
        return self.typed("mig_mode", mode, None if current is None else bool(current))

    def mig_devices(self) -> tuple[MigDevice, ...]:
        """``nvidia-smi -q`` ``<mig_devices>``: each MIG device's instance ids and its own memory."""
        count = _whole(self.q("nvmlDeviceGetMaxMigDeviceCount", self.h), high=MAX_MIG_DEVICES)
        out = []
        for index in range(count or 0):
            handle = self.q("nvmlDeviceGetMigDeviceHandleByIndex", self.h, index)
            if handle is NA:
                continue  # an empty slot answers Not Found
            mig = _DeviceReader(self.q, handle)
            used, total = mig.memory(v2=False)
            attributes = mig.q("nvmlDeviceGetAttributes", handle)
            out.append(MigDevice(
                index=index,
                gpu_instance_id=_whole(mig.q("nvmlDeviceGetGpuInstanceId", handle), high=2**31),
                compute_instance_id=_whole(mig.q("nvmlDeviceGetComputeInstanceId", handle), high=2**31),
                memory_used_bytes=used,
                memory_total_bytes=total,
                multiprocessor_count=_whole(mig.attr(attributes, "multiprocessorCount"), high=100_000),
                uuid=_text(mig.q("nvmlDeviceGetUUID", handle)),
            ))
        return tuple(out)

    def processes(self, process_name: Callable[[int], str | None]) -> tuple[GpuProcess, ...]:
        """``nvidia-smi --query-compute-apps=pid,process_name,used_memory`` (``<processes><process_info>``).

        A pid in both the compute and the graphics list is one ``compute+graphics`` process (a WDDM desktop
        application); its memory is None where the driver does not report it.
        """
        found: dict[int, tuple[set[str], Any]] = {}
        for func, kind in (
            ("nvmlDeviceGetComputeRunningProcesses", "compute"),
            ("nvmlDeviceGetGraphicsRunningProcesses", "graphics"),
        ):
            raw = self.get("processes", func)
            procs = _items(raw, MAX_PROCESSES)
            if procs is None:
                self.typed("processes", raw, None)
                continue
            for proc in procs:
                pid = _whole(getattr(proc, "pid", None), high=2**31)
                if pid is None:
                    self.unavailable.setdefault("processes", MALFORMED)
                    continue
                kinds, first = found.setdefault(pid, (set(), proc))
                kinds.add(kind)
        out = []
        for pid, (kinds, proc) in list(found.items())[:MAX_PROCESSES]:
            kind = "compute+graphics" if len(kinds) == 2 else kinds.pop()
            out.append(GpuProcess(
                pid=pid,
                name=process_name(pid),
                used_memory_bytes=_whole(getattr(proc, "usedGpuMemory", None), high=MAX_UINT64 - 1),
                kind=kind,
                gpu_instance_id=_instance(getattr(proc, "gpuInstanceId", None)),
                compute_instance_id=_instance(getattr(proc, "computeInstanceId", None)),
            ))
        return tuple(out)


def _instance(value: Any) -> int | None:
    number = _whole(value, high=2**32)
    return None if number is None or number == NO_MIG_INSTANCE else number


def _cuda_version(value: Any) -> str | None:
    """``12040`` -> ``12.4`` (nvmlSystemGetCudaDriverVersion encodes major*1000 + minor*10)."""
    number = _whole(value, high=10**7)
    if number is None:
        return None
    return f"{number // 1000}.{(number % 1000) // 10}"


def read_device(query: NvmlQuery, index: int, process_name: Callable[[int], str | None]) -> GpuDevice:
    """Every field of one GPU (``nvidia-smi -q -i INDEX``)."""
    handle = query("nvmlDeviceGetHandleByIndex", index)
    if handle is NA:
        return GpuDevice.blank(index, {"device": query.last_reason or "not available"})
    reader = _DeviceReader(query, handle)
    util_gpu, util_mem = reader.utilization()
    mem_used, mem_total = reader.memory()
    power_draw, power_limit = reader.power()
    sm, max_sm, mem_clock, max_mem_clock = reader.clocks()
    retired_sbe, retired_dbe, retired_pending = reader.retired_pages()
    remap_corr, remap_unc, remap_pending, remap_failure = reader.remapped_rows()
    gen, gen_max, width, width_max = reader.pcie()
    mig_enabled = reader.mig_enabled()
    return GpuDevice(
        index=index,
        name=reader.name(),
        uuid=reader.uuid(),
        pci_bus_id=reader.pci_bus_id(),
        utilization_gpu_pct=util_gpu,
        utilization_memory_pct=util_mem,
        memory_used_bytes=mem_used,
        memory_total_bytes=mem_total,
        temperature_c=reader.temperature(),
        power_draw_w=power_draw,
        power_limit_w=power_limit,
        sm_clock_mhz=sm,
        max_sm_clock_mhz=max_sm,
        mem_clock_mhz=mem_clock,
        max_mem_clock_mhz=max_mem_clock,
        clock_event_reasons=reader.clock_event_reasons(),
        ecc_enabled=reader.ecc_enabled(),
        ecc=reader.ecc_counts(),
        retired_pages_single_bit=retired_sbe,
        retired_pages_double_bit=retired_dbe,
        retired_pages_pending=retired_pending,
        remapped_rows_correctable=remap_corr,
        remapped_rows_uncorrectable=remap_unc,
        remapped_rows_pending=remap_pending,
        remapped_rows_failure=remap_failure,
        pcie_gen_current=gen,
        pcie_gen_max=gen_max,
        pcie_width_current=width,
        pcie_width_max=width_max,
        pcie_replay_count=reader.pcie_replay_count(),
        persistence_mode=reader.persistence_mode(),
        mig_enabled=mig_enabled,
        processes=reader.processes(process_name),
        unavailable=reader.unavailable,
        performance_state=reader.performance_state(),
        pcie_gen_max_device=reader.pcie_gen_max_device(),
        clock_event_time_s=reader.clock_event_times(),
        virtualization_mode=reader.virtualization_mode(),
        driver_model=reader.driver_model(),
        mig_devices=reader.mig_devices() if mig_enabled else (),
    )


def live_process_name(pid: int) -> str | None:
    """Name of a local process (psutil), or None when it is gone or hidden (another PID namespace)."""
    try:
        import psutil

        return str(psutil.Process(pid).name())
    except Exception:  # noqa: BLE001 - a vanished or foreign process has no name here
        return None


class NvmlBackend(GpuBackend):
    """Reads GPUs through NVML: the real library, a replay of recorded values, or a recording wrapper."""

    name = "nvml"

    def __init__(
        self,
        lib: Any = None,
        *,
        source: str = "libnvidia-ml",
        process_name: Callable[[int], str | None] | None = None,
    ) -> None:
        self.lib = lib if lib is not None else load_pynvml()
        self.source = source
        self.process_name = process_name or live_process_name
        self._initialised = False

    def init(self) -> str | None:
        """Initialise NVML; returns None on success or the reason it is not available."""
        if self.lib is None:
            return "nvidia-ml-py (pynvml) is not installed"
        if self._initialised:
            return None
        query = NvmlQuery(self.lib)
        if query("nvmlInit") is NA:
            return f"NVML could not initialise: {query.last_reason}"
        self._initialised = True
        return None

    def _count(self, query: NvmlQuery) -> tuple[int | None, str | None]:
        """(GPUs to read, or None, and why not)."""
        raw = query("nvmlDeviceGetCount")
        if raw is NA:
            return None, f"nvmlDeviceGetCount failed: {query.last_reason}"
        count = _whole(raw)
        if count is None:
            return None, f"nvmlDeviceGetCount answered {str(raw)[:40]!r}, not a count"
        return min(count, MAX_GPUS), None

    def probe(self) -> GpuProbe:
        """Every GPU (``nvidia-smi -q``)."""
        reason = self.init()
        if reason is not None:
            return GpuProbe(unavailable_snapshot("nvml", reason), (Note("gpu.nvml", reason),))
        query = NvmlQuery(self.lib)
        count, reason = self._count(query)
        if count is None:
            reason = reason or "no GPU count"
            return GpuProbe(unavailable_snapshot("nvml", reason), (Note("gpu.nvml", reason),))
        devices = tuple(read_device(query, i, self.process_name) for i in range(count))
        driver = _text(query("nvmlSystemGetDriverVersion"))
        cuda = _cuda_version(query("nvmlSystemGetCudaDriverVersion"))
        attached = _whole(query("nvmlDeviceGetCount"))
        notes = [
            Note("gpu.nvml", f"GPU {d.index}: no handle ({d.unavailable['device']})")
            for d in devices
            if "device" in d.unavailable
        ]
        notes += [
            Note("gpu.nvml", f"GPU {d.index}: {MALFORMED}: " + ", ".join(sorted(f for f, r in d.unavailable.items()
                                                                            if r == MALFORMED)))
            for d in devices
            if MALFORMED in d.unavailable.values()
        ]
        if attached is not None and attached > count:
            notes.append(Note("gpu.nvml", f"{attached} GPUs counted; read the first {count}"))
        notes += [
            Note("gpu.nvml", f"{func}: {reason}")
            for func, reason in sorted(query.failures.items())
            if func != "nvmlDeviceGetHandleByIndex" and func not in _OPTIONAL
            and (func not in _EXPECTED_GAPS or reason != "Not Supported")
        ]
        snapshot = GpuSnapshot(
            backend="nvml", source=self.source, driver_version=driver, cuda_version=cuda, devices=devices,
            available=True, attached_gpus=attached,
        )
        return GpuProbe(snapshot, tuple(notes))

    def sample(self) -> tuple[GpuDevice, ...]:
        """Only the fast-changing fields and the counters (``nvidia-smi dmon``).

        Utilisation, memory, temperature, power, SM clock, P-state and clock event reasons; the PCIe replay
        counter and the clock event time counters, whose growth over a watch is its window.
        """
        if self.init() is not None:
            return ()
        query = NvmlQuery(self.lib)
        count, _ = self._count(query)
        devices = []
        for index in range(count or 0):
            handle = query("nvmlDeviceGetHandleByIndex", index)
            if handle is NA:
                devices.append(GpuDevice.blank(index, {"device": query.last_reason or "not available"}))
                continue
            reader = _DeviceReader(query, handle)
            util_gpu, util_mem = reader.utilization()
            mem_used, mem_total = reader.memory()
            power_draw, power_limit = reader.power()
            devices.append(
                GpuDevice.blank(
                    index,
                    reader.unavailable,
                    utilization_gpu_pct=util_gpu,
                    utilization_memory_pct=util_mem,
                    memory_used_bytes=mem_used,
                    memory_total_bytes=mem_total,
                    temperature_c=reader.temperature(),
                    power_draw_w=power_draw,
                    power_limit_w=power_limit,
                    sm_clock_mhz=reader.whole("sm_clock", "nvmlDeviceGetClockInfo", NVML_CLOCK_SM, high=100_000),
                    max_sm_clock_mhz=reader.whole("max_sm_clock", "nvmlDeviceGetMaxClockInfo", NVML_CLOCK_SM,
                                                  high=100_000),
                    clock_event_reasons=reader.clock_event_reasons(),
                    performance_state=reader.performance_state(),
                    pcie_replay_count=reader.pcie_replay_count(),
                    clock_event_time_s=reader.clock_event_times(),
                )
            )
        return tuple(devices)

    def close(self) -> None:
        """``nvmlShutdown``."""
        if self._initialised:
            NvmlQuery(self.lib)("nvmlShutdown")
            self._initialised = False


# Functions that add detail where the driver has them; missing or "Not Supported" is never worth a note.
_OPTIONAL = frozenset({
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    "nvmlDeviceGetVirtualizationMode",
    "nvmlDeviceGetDriverModel",
    "nvmlDeviceGetViolationStatus",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetAttributes",
})

# Functions that are "Not Supported" by design on whole GPU generations; not worth a note each run.
_EXPECTED_GAPS = frozenset({
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetCurrentClocksEventReasons",
})


# ---------------------------------------------------------------------------------------------------------------
# Recorded NVML values


def call_key(func: str, args: tuple[Any, ...]) -> str:
    """Key of one call in a record: ``nvmlDeviceGetName`` or ``nvmlDeviceGetTotalEccErrors(1, 0)``."""
    return f"{func}({', '.join(repr(a) for a in args)})" if args else func


def _error_name(code: int) -> str:
    module = load_pynvml()
    if module is not None:
        for name in dir(module):
            if name.startswith("NVML_ERROR_") and getattr(module, name) == code:
                return name
    return f"NVML_ERROR_{code}"


def _raise_recorded(name: str) -> None:
    module = load_pynvml()
    if module is None:
        raise _NoNvmlError(name)
    code = getattr(module, name, None) if name.startswith("NVML_ERROR_") else None
    if not isinstance(code, int):
        code = module.NVML_ERROR_UNKNOWN
    raise module.NVMLError(code)


MAX_RECORD_BYTES = 16 * 1024 * 1024
"""Largest NVML record read (a real 8-GPU record is about 20 KB)."""
MAX_RECORD_DEPTH = 8
"""Nesting of a recorded answer (structs hold structs at most two deep)."""


def _decode(value: Any, depth: int = 0) -> Any:
    """A recorded JSON value in the shape pynvml returns (structs become attribute objects).

    A recorded error raises it; an answer nested deeper than :data:`MAX_RECORD_DEPTH` is a broken record and
    answers "Unknown Error" (the query helper makes it "not available").
    """
    if depth > MAX_RECORD_DEPTH:
        _raise_recorded("NVML_ERROR_UNKNOWN")
    if isinstance(value, Mapping):
        if set(value) == {"nvml_error"}:
            _raise_recorded(str(value["nvml_error"])[:64])
        return SimpleNamespace(**{str(k): _decode(v, depth + 1) for k, v in value.items()})
    if isinstance(value, list):
        return [_decode(v, depth + 1) for v in value]
    return value


def _encode(value: Any) -> Any:
    """A pynvml return value as JSON (ctypes structs and arrays, pynvml's friendly objects become JSON)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)) or hasattr(value, "_length_"):
        return [_encode(v) for v in value]
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        return {str(f[0]): _encode(getattr(value, f[0])) for f in fields}
    if hasattr(value, "__dict__"):
        return {str(k): _encode(v) for k, v in vars(value).items() if not k.startswith("_")}
    if hasattr(value, "value"):
        return _encode(value.value)
    return str(value)


class RecordFormatError(ValueError):
    """A recorded-NVML document is not in the expected shape."""


MIG_KEY = "mig_devices"
"""Key of a recorded device's MIG devices: ``{"<index>": {calls on that MIG device's handle}}``."""
MIG_MARK = "mig_device"
"""A recorded ``nvmlDeviceGetMigDeviceHandleByIndex`` answer: ``{"mig_device": <index>}``."""


class ReplayNvml:
    """Answers ``pynvml`` calls from a record, raising the recorded NVMLErrors.

    Handles are device indexes, and ``(device index, MIG index)`` pairs for MIG devices. A record is untrusted
    input: its shape is checked on load, and each answer is typed by the reader that uses it.
    """

    def __init__(self, record: Mapping[str, Any]) -> None:
        if not isinstance(record, Mapping) or record.get("format") != RECORD_FORMAT:
            raise RecordFormatError(f"not an NVML record (expected format {RECORD_FORMAT!r})")
        system = record.get("system")
        devices = record.get("devices")
        if not isinstance(system, Mapping) or not isinstance(devices, list):
            raise RecordFormatError("an NVML record needs a 'system' object and a 'devices' list")
        if not all(isinstance(d, Mapping) for d in devices):
            raise RecordFormatError("each entry of 'devices' must be an object of recorded calls")
        self.system: Mapping[str, Any] = system
        self.devices: list[Mapping[str, Any]] = list(devices[:MAX_GPUS])
        names = record.get("process_names")
        self.process_names: dict[int, str] = {}
        if isinstance(names, Mapping):
            for key, name in list(names.items())[:100_000]:
                pid = read_int(key, low=0, high=2**31)
                if pid is not None and isinstance(name, str):
                    self.process_names[pid] = name[:MAX_TEXT_CHARS]

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayNvml:
        """Load a record; raises OSError, ValueError (bad or over-large JSON) or :class:`RecordFormatError`."""
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_RECORD_BYTES + 1)
        return cls(load_json(data.decode("utf-8", "replace"), max_chars=MAX_RECORD_BYTES))

    def process_name(self, pid: int) -> str | None:
        """The recorded name of a GPU process."""
        return self.process_names.get(pid)

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's name
        """Raises the recorded init error, if any."""
        if "nvmlInit" in self.system:
            _decode(self.system["nvmlInit"])

    def nvmlShutdown(self) -> None:  # noqa: N802 - pynvml's name
        """Nothing to release."""

    def nvmlDeviceGetCount(self) -> Any:  # noqa: N802 - pynvml's name
        """Number of recorded devices (or the recorded answer, typed by the caller)."""
        if "nvmlDeviceGetCount" in self.system:
            return _decode(self.system["nvmlDeviceGetCount"])
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802 - pynvml's name
        """The index itself, or the recorded error (e.g. GPU is lost)."""
        if not 0 <= index < len(self.devices):
            _raise_recorded("NVML_ERROR_INVALID_ARGUMENT")
        recorded = self.devices[index].get("nvmlDeviceGetHandleByIndex")
        if recorded is not None:
            _decode(recorded)
        return index

    def _calls(self, handle: Any) -> Mapping[str, Any]:
        """The recorded calls of a device or MIG device handle."""
        if isinstance(handle, tuple):
            parent, mig = handle
            migs = self.devices[parent].get(MIG_KEY)
            calls = migs.get(str(mig)) if isinstance(migs, Mapping) else None
            return typing.cast(Mapping[str, Any], calls) if isinstance(calls, Mapping) else {}
        return self.devices[int(handle)]

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> tuple[int, int]:  # noqa: N802
        """A MIG device handle, where the record has one at ``index`` (else Not Found)."""
        if isinstance(handle, tuple):
            _raise_recorded("NVML_ERROR_INVALID_ARGUMENT")
        key = call_key("nvmlDeviceGetMigDeviceHandleByIndex", (index,))
        recorded = self.devices[handle].get(key)
        if recorded is None:
            _raise_recorded("NVML_ERROR_NOT_FOUND")
        _decode(recorded)
        return (handle, index)

    def __getattr__(self, func: str) -> Callable[..., Any]:
        if not func.startswith("nvml"):
            raise AttributeError(func)
        if func.startswith("nvmlDevice"):

            def device_call(handle: Any, *args: Any) -> Any:
                calls = self._calls(handle)
                key = call_key(func, args)
                if key not in calls:
                    _raise_recorded("NVML_ERROR_FUNCTION_NOT_FOUND")
                return _decode(calls[key])

            return device_call

        def system_call(*args: Any) -> Any:
            key = call_key(func, args)
            if key not in self.system:
                _raise_recorded("NVML_ERROR_FUNCTION_NOT_FOUND")
            return _decode(self.system[key])

        return system_call


class RecordingNvml:
    """Wraps a ``pynvml``-like library and records every call's result (or NVMLError) for :class:`ReplayNvml`."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        self.system: dict[str, Any] = {}
        self.devices: list[dict[str, Any]] = []
        self._handles: list[tuple[Any, int, int | None]] = []
        self._error_class = _nvml_error_class()

    def _owner(self, handle: Any) -> tuple[int, int | None] | None:
        """(device index, MIG index or None) of a handle this wrapper handed out."""
        for known, index, mig in self._handles:
            if known is handle or (known == handle and isinstance(handle, (int, tuple))):
                return index, mig
        return None

    def _target(self, index: int, mig: int | None) -> dict[str, Any]:
        while len(self.devices) <= index:
            self.devices.append({})
        device = self.devices[index]
        if mig is None:
            return device
        migs: dict[str, dict[str, Any]] = device.setdefault(MIG_KEY, {})
        return migs.setdefault(str(mig), {})

    def __getattr__(self, func: str) -> Callable[..., Any]:
        real = getattr(self.lib, func)

        def call(*args: Any) -> Any:
            owner = self._owner(args[0]) if args and func.startswith("nvmlDevice") else None
            key_args = args[1:] if owner is not None else args
            if func == "nvmlDeviceGetHandleByIndex":
                owner, key_args = (int(args[0]), None), ()
            target = self.system if owner is None else self._target(*owner)
            key = call_key(func, key_args)
            try:
                value = real(*args)
            except self._error_class as exc:
                target[key] = {"nvml_error": _error_name(int(getattr(exc, "value", -1)))}
                raise
            if func == "nvmlDeviceGetHandleByIndex":
                self._handles.append((value, int(args[0]), None))
            elif func == "nvmlDeviceGetMigDeviceHandleByIndex" and owner is not None:
                self._handles.append((value, owner[0], int(args[1])))
                target[key] = {MIG_MARK: int(args[1])}
            else:
                target[key] = _encode(value)
            return value

        return call

    def record(self, process_names: Mapping[int, str] | None = None) -> dict[str, Any]:
        """The record as JSON-ready data."""
        return {
            "format": RECORD_FORMAT,
            "system": dict(self.system),
            "devices": [dict(d) for d in self.devices],
            "process_names": {str(k): v for k, v in (process_names or {}).items()},
        }


def record_live_nvml(path: str | Path) -> GpuProbe:
    """Probe the real GPUs through a recording wrapper and write the record to ``path``."""
    lib = load_pynvml()
    recorder = RecordingNvml(lib) if lib is not None else None
    backend = NvmlBackend(recorder)
    try:
        probe = backend.probe()
    finally:
        backend.close()
    names = {p.pid: p.name for d in probe.snapshot.devices for p in d.processes if p.name}
    data = recorder.record(names) if recorder is not None else {
        "format": RECORD_FORMAT, "system": {"nvmlInit": {"nvml_error": "NVML_ERROR_LIBRARY_NOT_FOUND"}}, "devices": []
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return probe


def replay_backend(path: str | Path) -> NvmlBackend:
    """An NVML backend answering from a recorded file (raises OSError / ValueError on a bad file)."""
    replay = ReplayNvml.from_file(path)
    return NvmlBackend(replay, source=str(path), process_name=replay.process_name)
