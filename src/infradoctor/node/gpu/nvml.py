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
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Final

from infradoctor.node.evidence import EccCounts, GpuDevice, GpuProcess, GpuSnapshot, Note
from infradoctor.node.gpu.base import GpuBackend, GpuProbe, unavailable_snapshot

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


def _na(value: Any) -> bool:
    return value is NA or value is None


def _int(value: Any) -> int | None:
    return None if _na(value) else int(value)


def _bool(value: Any) -> bool | None:
    return None if _na(value) else bool(value)


def _text(value: Any) -> str | None:
    if _na(value):
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


class _DeviceReader:
    """Reads one GPU through the query helper and keeps the reason for each field it could not read."""

    def __init__(self, query: NvmlQuery, handle: Any) -> None:
        self.q = query
        self.h = handle
        self.unavailable: dict[str, str] = {}

    def get(self, field: str, func: str, *args: Any) -> Any:
        value = self.q(func, self.h, *args)
        if value is NA:
            self.unavailable.setdefault(field, self.q.last_reason or "not available")
        return value

    def name(self) -> str | None:
        """``nvidia-smi --query-gpu=name`` (``<product_name>``)."""
        return _text(self.get("name", "nvmlDeviceGetName"))

    def uuid(self) -> str | None:
        """``nvidia-smi --query-gpu=uuid`` (``<uuid>``)."""
        return _text(self.get("uuid", "nvmlDeviceGetUUID"))

    def pci_bus_id(self) -> str | None:
        """``nvidia-smi --query-gpu=pci.bus_id`` (``<pci><pci_bus_id>``)."""
        info = self.get("pci_bus_id", "nvmlDeviceGetPciInfo")
        return None if _na(info) else _text(getattr(info, "busId", None))

    def utilization(self) -> tuple[float | None, float | None]:
        """``nvidia-smi --query-gpu=utilization.gpu,utilization.memory`` (``<utilization>``)."""
        rates = self.get("utilization", "nvmlDeviceGetUtilizationRates")
        if _na(rates):
            return None, None
        return float(rates.gpu), float(rates.memory)

    def memory(self) -> tuple[int | None, int | None]:
        """``nvidia-smi --query-gpu=memory.used,memory.total`` (``<fb_memory_usage>``), in bytes.

        The v2 query (driver R510 and later) leaves the driver's reserved memory out of "used", as nvidia-smi
        does; older drivers answer only the v1 query, whose "used" includes it.
        """
        info = self.q("nvmlDeviceGetMemoryInfo", self.h, NVML_MEMORY_V2)
        if info is not NA:
            return int(info.used), int(info.total)
        self.q.failures.pop("nvmlDeviceGetMemoryInfo", None)
        info = self.get("memory", "nvmlDeviceGetMemoryInfo")
        if _na(info):
            return None, None
        return int(info.used), int(info.total)

    def temperature(self) -> float | None:
        """``nvidia-smi --query-gpu=temperature.gpu`` (``<temperature><gpu_temp>``)."""
        value = self.get("temperature", "nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)
        return None if _na(value) else float(value)

    def power(self) -> tuple[float | None, float | None]:
        """``nvidia-smi --query-gpu=power.draw,enforced.power.limit`` (``<gpu_power_readings>``), in watts."""
        draw = self.get("power_draw", "nvmlDeviceGetPowerUsage")
        limit = self.get("power_limit", "nvmlDeviceGetEnforcedPowerLimit")
        return (None if _na(draw) else draw / 1000.0), (None if _na(limit) else limit / 1000.0)

    def clocks(self) -> tuple[int | None, int | None, int | None, int | None]:
        """``nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem`` (``<clocks>``)."""
        return (
            _int(self.get("sm_clock", "nvmlDeviceGetClockInfo", NVML_CLOCK_SM)),
            _int(self.get("max_sm_clock", "nvmlDeviceGetMaxClockInfo", NVML_CLOCK_SM)),
            _int(self.get("mem_clock", "nvmlDeviceGetClockInfo", NVML_CLOCK_MEM)),
            _int(self.get("max_mem_clock", "nvmlDeviceGetMaxClockInfo", NVML_CLOCK_MEM)),
        )

    def clock_event_reasons(self) -> int | None:
        """``nvidia-smi --query-gpu=clocks_event_reasons.active`` (``<clocks_event_reasons>``).

        Older drivers and nvidia-ml-py call them ``clocks_throttle_reasons``.
        """
        value = self.q("nvmlDeviceGetCurrentClocksEventReasons", self.h)
        if value is NA:
            value = self.get("clock_event_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
        return _int(value)

    def ecc_enabled(self) -> bool | None:
        """``nvidia-smi --query-gpu=ecc.mode.current`` (``<ecc_mode><current_ecc>``)."""
        mode = self.get("ecc_mode", "nvmlDeviceGetEccMode")
        return None if _na(mode) else bool(mode[0])

    def ecc_counts(self) -> EccCounts:
        """``nvidia-smi --query-gpu=ecc.errors.{corrected,uncorrected}.{volatile,aggregate}.total``.

        In the XML: ``<ecc_errors><volatile|aggregate>``.
        """

        def count(error_type: int, counter: int, field: str) -> int | None:
            return _int(self.get(field, "nvmlDeviceGetTotalEccErrors", error_type, counter))

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
        return (None if _na(single) else len(single)), (None if _na(double) else len(double)), _bool(pending)

    def remapped_rows(self) -> tuple[int | None, int | None, bool | None, bool | None]:
        """``nvidia-smi --query-remapped-rows`` / ``-q -d ROW_REMAPPER`` (``<remapped_rows>``): Ampere and later."""
        rows = self.get("remapped_rows", "nvmlDeviceGetRemappedRows")
        if _na(rows):
            return None, None, None, None
        correctable, uncorrectable, pending, failure = rows
        return int(correctable), int(uncorrectable), bool(pending), bool(failure)

    def pcie(self) -> tuple[int | None, int | None, int | None, int | None]:
        """``nvidia-smi --query-gpu=pcie.link.{gen,width}.{current,max}`` (``<pci><pci_gpu_link_info>``)."""
        return (
            _int(self.get("pcie_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration")),
            _int(self.get("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration")),
            _int(self.get("pcie_width_current", "nvmlDeviceGetCurrPcieLinkWidth")),
            _int(self.get("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")),
        )

    def pcie_replay_count(self) -> int | None:
        """``nvidia-smi -q`` ``<pci><replay_counter>``."""
        return _int(self.get("pcie_replay_count", "nvmlDeviceGetPcieReplayCounter"))

    def persistence_mode(self) -> bool | None:
        """``nvidia-smi --query-gpu=persistence_mode`` (``<persistence_mode>``)."""
        return _bool(self.get("persistence_mode", "nvmlDeviceGetPersistenceMode"))

    def mig_enabled(self) -> bool | None:
        """``nvidia-smi --query-gpu=mig.mode.current`` (``<mig_mode><current_mig>``); None on GPUs without MIG."""
        mode = self.get("mig_mode", "nvmlDeviceGetMigMode")
        return None if _na(mode) else bool(mode[0])

    def processes(self, process_name: Callable[[int], str | None]) -> tuple[GpuProcess, ...]:
        """``nvidia-smi --query-compute-apps=pid,process_name,used_memory`` (``<processes><process_info>``)."""
        out: dict[tuple[int, str], GpuProcess] = {}
        for func, kind in (
            ("nvmlDeviceGetComputeRunningProcesses", "compute"),
            ("nvmlDeviceGetGraphicsRunningProcesses", "graphics"),
        ):
            procs = self.get("processes", func)
            if _na(procs):
                continue
            for proc in procs:
                pid = int(proc.pid)
                used = getattr(proc, "usedGpuMemory", None)
                out.setdefault(
                    (pid, kind),
                    GpuProcess(pid=pid, name=process_name(pid), used_memory_bytes=_int(used), kind=kind),
                )
        return tuple(out.values())


def _cuda_version(value: Any) -> str | None:
    """``12040`` -> ``12.4`` (nvmlSystemGetCudaDriverVersion encodes major*1000 + minor*10)."""
    if _na(value):
        return None
    number = int(value)
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
        mig_enabled=reader.mig_enabled(),
        processes=reader.processes(process_name),
        unavailable=dict(reader.unavailable),
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

    def probe(self) -> GpuProbe:
        """Every GPU (``nvidia-smi -q``)."""
        reason = self.init()
        if reason is not None:
            return GpuProbe(unavailable_snapshot("nvml", reason), (Note("gpu.nvml", reason),))
        query = NvmlQuery(self.lib)
        count = query("nvmlDeviceGetCount")
        if count is NA:
            reason = f"nvmlDeviceGetCount failed: {query.last_reason}"
            return GpuProbe(unavailable_snapshot("nvml", reason), (Note("gpu.nvml", reason),))
        devices = tuple(read_device(query, i, self.process_name) for i in range(int(count)))
        driver = _text(query("nvmlSystemGetDriverVersion"))
        cuda = _cuda_version(query("nvmlSystemGetCudaDriverVersion"))
        notes = [
            Note("gpu.nvml", f"GPU {d.index}: no handle ({d.unavailable['device']})")
            for d in devices
            if "device" in d.unavailable
        ]
        notes += [
            Note("gpu.nvml", f"{func}: {reason}")
            for func, reason in sorted(query.failures.items())
            if func != "nvmlDeviceGetHandleByIndex" and (func not in _EXPECTED_GAPS or reason != "Not Supported")
        ]
        snapshot = GpuSnapshot(
            backend="nvml", source=self.source, driver_version=driver, cuda_version=cuda, devices=devices,
            available=True,
        )
        return GpuProbe(snapshot, tuple(notes))

    def sample(self) -> tuple[GpuDevice, ...]:
        """Only the fast-changing fields (``nvidia-smi dmon``).

        Utilisation, memory, temperature, power, SM clock and clock event reasons.
        """
        if self.init() is not None:
            return ()
        query = NvmlQuery(self.lib)
        count = query("nvmlDeviceGetCount")
        if count is NA:
            return ()
        devices = []
        for index in range(int(count)):
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
                    sm_clock_mhz=_int(reader.get("sm_clock", "nvmlDeviceGetClockInfo", NVML_CLOCK_SM)),
                    clock_event_reasons=reader.clock_event_reasons(),
                )
            )
        return tuple(devices)

    def close(self) -> None:
        """``nvmlShutdown``."""
        if self._initialised:
            NvmlQuery(self.lib)("nvmlShutdown")
            self._initialised = False


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
    code = getattr(module, name, None)
    if not isinstance(code, int):
        code = module.NVML_ERROR_UNKNOWN
    raise module.NVMLError(code)


def _decode(value: Any) -> Any:
    """A recorded JSON value in the shape pynvml returns (structs become attribute objects)."""
    if isinstance(value, Mapping):
        if set(value) == {"nvml_error"}:
            _raise_recorded(str(value["nvml_error"]))
        return SimpleNamespace(**{k: _decode(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _encode(value: Any) -> Any:
    """A pynvml return value as JSON (ctypes structs and pynvml's friendly objects become objects)."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
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


class ReplayNvml:
    """Answers ``pynvml`` calls from a record, raising the recorded NVMLErrors; handles are device indexes."""

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
        self.devices: list[Mapping[str, Any]] = list(devices)
        names = record.get("process_names") or {}
        self.process_names: dict[int, str] = {int(k): str(v) for k, v in dict(names).items()}

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayNvml:
        """Load a record; raises OSError, ValueError (bad JSON) or :class:`RecordFormatError`."""
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    def process_name(self, pid: int) -> str | None:
        """The recorded name of a GPU process."""
        return self.process_names.get(pid)

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's name
        """Raises the recorded init error, if any."""
        if "nvmlInit" in self.system:
            _decode(self.system["nvmlInit"])

    def nvmlShutdown(self) -> None:  # noqa: N802 - pynvml's name
        """Nothing to release."""

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802 - pynvml's name
        """Number of recorded devices (or the recorded error)."""
        if "nvmlDeviceGetCount" in self.system:
            return int(_decode(self.system["nvmlDeviceGetCount"]))
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802 - pynvml's name
        """The index itself, or the recorded error (e.g. GPU is lost)."""
        if not 0 <= index < len(self.devices):
            _raise_recorded("NVML_ERROR_INVALID_ARGUMENT")
        recorded = self.devices[index].get("nvmlDeviceGetHandleByIndex")
        if recorded is not None:
            _decode(recorded)
        return index

    def __getattr__(self, func: str) -> Callable[..., Any]:
        if not func.startswith("nvml"):
            raise AttributeError(func)
        if func.startswith("nvmlDevice"):

            def device_call(handle: int, *args: Any) -> Any:
                calls = self.devices[handle]
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
        self._handles: list[tuple[Any, int]] = []
        self._error_class = _nvml_error_class()

    def _device_index(self, handle: Any) -> int | None:
        for known, index in self._handles:
            if known is handle:
                return index
        return None

    def __getattr__(self, func: str) -> Callable[..., Any]:
        real = getattr(self.lib, func)

        def call(*args: Any) -> Any:
            index = self._device_index(args[0]) if args and func.startswith("nvmlDevice") else None
            key_args = args[1:] if index is not None else args
            if func == "nvmlDeviceGetHandleByIndex":
                index, key_args = int(args[0]), ()
            target = self.system
            if index is not None:
                while len(self.devices) <= index:
                    self.devices.append({})
                target = self.devices[index]
            key = call_key(func, key_args)
            try:
                value = real(*args)
            except self._error_class as exc:
                target[key] = {"nvml_error": _error_name(int(getattr(exc, "value", -1)))}
                raise
            if func == "nvmlDeviceGetHandleByIndex":
                self._handles.append((value, int(args[0])))
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
