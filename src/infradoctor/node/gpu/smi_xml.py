"""GPU state from nvidia-smi's reports: ``nvidia-smi -q -x`` (XML) and ``nvidia-smi -q`` (text).

The fallback when the NVML library cannot be loaded from Python, and the reader of reports saved elsewhere
(``--smi-xml FILE`` takes either format). :mod:`.smi_tree` reads both formats, hardened and bounded, into the tree
of ``-q -x``; this module turns that tree into evidence. It reads the layouts of drivers old and new:
``<clocks_event_reasons>`` (R535 and later) and ``<clocks_throttle_reasons>`` (older), their time counters
(``<clocks_event_reasons_counters>``), ``<gpu_power_readings>`` and ``<power_readings>``, ECC counters as
``sram_/dram_(un)correctable`` or as the older ``single_bit``/``double_bit`` totals, MIG devices with their own
memory, processes with their MIG instance. "N/A", placeholders and missing elements become None; every number
goes through :mod:`infradoctor.bounded`. A document that is not an nvidia-smi report yields an unavailable
snapshot and a note, never an exception; a partial one yields the GPUs it holds and a note.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from infradoctor.bounded import read_float, read_int
from infradoctor.node.evidence import EccCounts, GpuDevice, GpuProcess, GpuSnapshot, MigDevice, Note
from infradoctor.node.gpu.base import REASON_BY_NAME, GpuBackend, GpuProbe, unavailable_snapshot
from infradoctor.node.gpu.smi_tree import MAX_DOCUMENT_BYTES, MAX_TEXT_CHARS, read_tree
from infradoctor.procs import run_capture

SMI_TIMEOUT_S = 15.0
"""Longest wait for ``nvidia-smi -q -x`` (a hung driver makes it block)."""
SAMPLE_FIELDS = ("index", "utilization.gpu", "utilization.memory", "memory.used", "memory.total", "temperature.gpu",
                 "power.draw", "power.limit", "clocks.sm", "clocks.max.sm", "pstate")
"""``--query-gpu`` fields of a watch sample, followed by the clock event reasons field."""
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
"""The reasons field as drivers from R535 name it, then as older drivers do."""
MAX_PROCESSES = 256
"""Processes kept per GPU (the rest are counted in ``unavailable``)."""
MAX_MIG_DEVICES = 32
"""MIG devices kept per GPU (a GPU has at most 7 today)."""
MAX_COUNT = 2**63
"""Largest counter or size taken as a reading."""

_READING = re.compile(r"([-+]?\d{1,40}(?:\.\d{1,40})?)\s*[A-Za-z%/]{0,8}")
_QUANTITY = re.compile(r"([-+]?\d{1,40}(?:\.\d{1,40})?)\s*([A-Za-z]{0,3})")
_PCI_BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_UNIT_BYTES = {"B": 1, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3, "KB": 1000, "MB": 1000**2, "GB": 1000**3}
_UNIT_SECONDS = {"NS": 1e-9, "US": 1e-6, "MS": 1e-3, "S": 1.0}
_MISSING = frozenset({"N/A", "[N/A]", "NOT SUPPORTED", "[NOT SUPPORTED]", "UNKNOWN ERROR", "[UNKNOWN ERROR]",
                      "REQUESTED FUNCTIONALITY HAS BEEN DEPRECATED", "INSUFFICIENT PERMISSIONS"})
_KINDS = {"C": "compute", "G": "graphics", "C+G": "compute+graphics", "M": "compute", "M+C": "compute"}
_COUNTER_REASONS = {
    "sw_power_cap": "sw_power_cap",
    "sync_boost": "sync_boost",
    "sw_therm_slowdown": "sw_thermal_slowdown",
    "hw_therm_slowdown": "hw_thermal_slowdown",
    "hw_power_brake": "hw_power_brake_slowdown",
}
_VIRTUALIZATION = {"none": "none", "pass-through": "pass-through", "passthrough": "pass-through", "vgpu": "vgpu",
                   "host vgpu": "host-vgpu", "host_vgpu": "host-vgpu", "host vsga": "host-vsga"}


def _find(element: ET.Element | None, path: str) -> ET.Element | None:
    return None if element is None else element.find(path)


def _text(element: ET.Element | None, path: str) -> str | None:
    """Stripped text of ``path`` below ``element``; None for missing, empty or ``N/A`` values."""
    node = _find(element, path)
    if node is None or node.text is None:
        return None
    text = node.text[:MAX_TEXT_CHARS].strip()
    if not text or text.upper() in _MISSING:
        return None
    return text


def _number(element: ET.Element | None, *paths: str) -> float | None:
    """The reading of the first present path (``"45 C"`` -> 45.0, ``"16x"`` -> 16.0), bounded; else None."""
    for path in paths:
        text = _text(element, path)
        if text is None:
            continue
        match = _READING.fullmatch(text)
        if match:
            return read_float(match.group(1))
    return None


def _int(element: ET.Element | None, *paths: str) -> int | None:
    value = _number(element, *paths)
    if value is None or not -MAX_COUNT <= value <= MAX_COUNT:
        return None
    return int(value)


def _quantity(element: ET.Element | None, path: str, units: Mapping[str, float], default: str) -> float | None:
    """``"81559 MiB"`` with ``units`` -> the value in the base unit; an unknown unit or a bad number is None."""
    text = _text(element, path)
    if text is None:
        return None
    match = _QUANTITY.fullmatch(text)
    if not match:
        return None
    number = read_float(match.group(1), low=0.0)
    scale = units.get(match.group(2).upper() or default)
    if number is None or scale is None:
        return None
    return number * scale


def _bytes(element: ET.Element | None, path: str) -> int | None:
    """``"81559 MiB"`` -> bytes."""
    value = _quantity(element, path, _UNIT_BYTES, "MIB")
    return None if value is None or value > MAX_COUNT else int(value)


def _flag(element: ET.Element | None, path: str) -> bool | None:
    """``Enabled``/``Yes``/``Active`` -> True, ``Disabled``/``No``/``Not Active`` -> False."""
    text = _text(element, path)
    if text is None:
        return None
    lowered = text.lower()
    if lowered in ("enabled", "yes", "active", "on", "true"):
        return True
    if lowered in ("disabled", "no", "not active", "off", "false", "none"):
        return False
    return None


def _pci_bus_id(text: str | None) -> str | None:
    """A PCI bus id of the form ``00000000:3B:00.0``, else None (an id that is not one is not kept)."""
    if text is None:
        return None
    text = text.strip()
    return text if _PCI_BUS_ID.fullmatch(text) else None


def _reasons(gpu: ET.Element) -> int | None:
    """The active clock event reasons as NVML's bitmask, from either element name."""
    for container, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        block = gpu.find(container)
        if block is None:
            continue
        mask = 0
        seen = False
        for child in block:
            if not child.tag.startswith(prefix):
                continue
            reason = REASON_BY_NAME.get(child.tag[len(prefix):])
            state = (child.text or "")[:40].strip().lower()
            if reason is None or state not in ("active", "not active"):
                continue
            seen = True
            if state == "active":
                mask |= reason.bit
        return mask if seen else None
    return None


def _reason_times(gpu: ET.Element) -> dict[str, float]:
    """Seconds each reason held the clocks since the driver loaded (``<clocks_event_reasons_counters>``)."""
    block = gpu.find("clocks_event_reasons_counters")
    out: dict[str, float] = {}
    if block is None:
        return out
    prefix = "clocks_event_reasons_counters_"
    for child in block:
        reason = _COUNTER_REASONS.get(child.tag.removeprefix(prefix))
        if reason is None:
            continue
        seconds = _quantity(child, ".", _UNIT_SECONDS, "US")
        if seconds is not None:
            out[reason] = round(seconds, 6)
    return out


def _ecc_block(block: ET.Element | None) -> tuple[int | None, int | None]:
    """(corrected, uncorrected) summed over memory locations of a ``<volatile>``/``<aggregate>`` block."""
    if block is None:
        return None, None
    single, double = block.find("single_bit"), block.find("double_bit")
    if single is not None or double is not None:  # R450 and older
        return _int(single, "total"), _int(double, "total")
    corrected: int | None = None
    uncorrected: int | None = None
    for child in block:
        value = _int(child, ".")
        if value is None:
            continue
        if "uncorrectable" in child.tag:
            uncorrected = (uncorrected or 0) + value
        elif "correctable" in child.tag:
            corrected = (corrected or 0) + value
    return corrected, uncorrected


def _instance_id(element: ET.Element | None, path: str) -> int | None:
    return read_int(_text(element, path), low=0, high=2**31)


def _processes(gpu: ET.Element, unavailable: dict[str, str]) -> tuple[GpuProcess, ...]:
    out: list[GpuProcess] = []
    infos = gpu.findall("processes/process_info")
    for info in infos[:MAX_PROCESSES]:
        pid = read_int(_text(info, "pid"), low=0, high=2**31)
        if pid is None:
            continue
        kind = (_text(info, "type") or "C").upper().replace(" ", "")
        out.append(
            GpuProcess(
                pid=pid,
                name=_text(info, "process_name"),
                used_memory_bytes=_bytes(info, "used_memory"),
                kind=_KINDS.get(kind, "compute"),
                gpu_instance_id=_instance_id(info, "gpu_instance_id"),
                compute_instance_id=_instance_id(info, "compute_instance_id"),
            )
        )
    if len(infos) > MAX_PROCESSES:
        unavailable["processes"] = f"{len(infos)} processes listed; kept the first {MAX_PROCESSES}"
    return tuple(out)


def _mig_devices(gpu: ET.Element) -> tuple[MigDevice, ...]:
    out = []
    for position, mig in enumerate(gpu.findall("mig_devices/mig_device")[:MAX_MIG_DEVICES]):
        index = read_int(_text(mig, "index"), low=0, high=1024)
        out.append(
            MigDevice(
                index=position if index is None else index,
                gpu_instance_id=_instance_id(mig, "gpu_instance_id"),
                compute_instance_id=_instance_id(mig, "compute_instance_id"),
                memory_used_bytes=_bytes(mig, "fb_memory_usage/used"),
                memory_total_bytes=_bytes(mig, "fb_memory_usage/total"),
                multiprocessor_count=_int(mig, "device_attributes/shared/multiprocessor_count"),
            )
        )
    return tuple(out)


def _performance_state(gpu: ET.Element) -> int | None:
    text = _text(gpu, "performance_state")
    if text is None or not text.upper().startswith("P"):
        return None
    return read_int(text[1:], low=0, high=15)


def parse_gpu(gpu: ET.Element, index: int) -> GpuDevice:
    """One ``<gpu>`` element."""
    unavailable: dict[str, str] = {}
    ecc_volatile = _ecc_block(gpu.find("ecc_errors/volatile"))
    ecc_aggregate = _ecc_block(gpu.find("ecc_errors/aggregate"))
    power = gpu.find("gpu_power_readings")
    if power is None:
        power = gpu.find("power_readings")
    link = gpu.find("pci/pci_gpu_link_info")
    remapped = gpu.find("remapped_rows")
    retired = gpu.find("retired_pages")
    pending_retire = _flag(retired, "pending_retirement")
    if pending_retire is None:
        pending_retire = _flag(retired, "pending_blacklist")
    virtualization = _text(gpu, "gpu_virtualization_mode/virtualization_mode")
    virtualization = _VIRTUALIZATION.get(virtualization.lower(), virtualization.lower()) if virtualization else None
    temperature = _number(gpu, "temperature/gpu_temp")
    sm_clock, max_sm_clock = _int(gpu, "clocks/sm_clock"), _int(gpu, "max_clocks/sm_clock")
    if virtualization == "vgpu":
        # A vGPU guest reports 0 C and 0 MHz: placeholders for what the host does not share, not readings.
        temperature = temperature or None
        sm_clock, max_sm_clock = sm_clock or None, max_sm_clock or None
    raw_id = _text(gpu, "pci/pci_bus_id") or (gpu.get("id") or "")[:MAX_TEXT_CHARS] or None
    pci_bus_id = _pci_bus_id(raw_id)
    if raw_id and pci_bus_id is None:
        unavailable["pci_bus_id"] = "not a PCI bus id in the report"
    device = GpuDevice(
        index=index,
        name=_text(gpu, "product_name"),
        uuid=_text(gpu, "uuid"),
        pci_bus_id=pci_bus_id,
        utilization_gpu_pct=_number(gpu, "utilization/gpu_util"),
        utilization_memory_pct=_number(gpu, "utilization/memory_util"),
        memory_used_bytes=_bytes(gpu, "fb_memory_usage/used"),
        memory_total_bytes=_bytes(gpu, "fb_memory_usage/total"),
        temperature_c=temperature,
        power_draw_w=_number(power, "power_draw", "instant_power_draw", "average_power_draw"),
        power_limit_w=_number(power, "current_power_limit", "enforced_power_limit", "power_limit",
                              "gpu_ceiling_power_limit/current_power_limit"),
        sm_clock_mhz=sm_clock,
        max_sm_clock_mhz=max_sm_clock,
        mem_clock_mhz=_int(gpu, "clocks/mem_clock"),
        max_mem_clock_mhz=_int(gpu, "max_clocks/mem_clock"),
        clock_event_reasons=_reasons(gpu),
        ecc_enabled=_flag(gpu, "ecc_mode/current_ecc"),
        ecc=EccCounts(ecc_volatile[0], ecc_volatile[1], ecc_aggregate[0], ecc_aggregate[1]),
        retired_pages_single_bit=_int(retired, "multiple_single_bit_retirement/retired_count"),
        retired_pages_double_bit=_int(retired, "double_bit_retirement/retired_count"),
        retired_pages_pending=pending_retire,
        remapped_rows_correctable=_int(remapped, "remapped_row_corr"),
        remapped_rows_uncorrectable=_int(remapped, "remapped_row_unc"),
        remapped_rows_pending=_flag(remapped, "remapped_row_pending"),
        remapped_rows_failure=_flag(remapped, "remapped_row_failure"),
        pcie_gen_current=_int(link, "pcie_gen/current_link_gen"),
        pcie_gen_max=_int(link, "pcie_gen/max_link_gen"),
        pcie_width_current=_int(link, "link_widths/current_link_width"),
        pcie_width_max=_int(link, "link_widths/max_link_width"),
        pcie_replay_count=_int(gpu, "pci/replay_counter"),
        persistence_mode=_flag(gpu, "persistence_mode"),
        mig_enabled=_flag(gpu, "mig_mode/current_mig"),
        processes=_processes(gpu, unavailable),
        unavailable=unavailable,
        performance_state=_performance_state(gpu),
        pcie_gen_max_device=_int(link, "pcie_gen/max_device_link_gen"),
        pcie_gen_max_host=_int(link, "pcie_gen/max_host_link_gen"),
        clock_event_time_s=_reason_times(gpu),
        virtualization_mode=virtualization,
        driver_model=_text(gpu, "driver_model/current_dm"),
        mig_devices=_mig_devices(gpu),
    )
    for field in ("name", "memory_total_bytes", "temperature_c", "clock_event_reasons", "pcie_width_current"):
        if getattr(device, field) is None:
            unavailable.setdefault(field, "N/A or missing in the nvidia-smi report")
    return device


def parse_smi_report(data: str | bytes, *, source: str = "nvidia-smi -q -x") -> GpuProbe:
    """A snapshot from ``nvidia-smi -q -x`` or ``nvidia-smi -q`` output (the format is recognised).

    What is not an nvidia-smi report gives an unavailable snapshot and a note; a partial report gives the GPUs it
    holds and a note saying what was cut.
    """
    tree = read_tree(data)
    label = {"xml": "nvidia-smi XML", "text": "nvidia-smi -q text"}.get(tree.format, "report")
    gpus = tree.root.findall("gpu") if tree.root is not None else []
    if tree.root is None or (tree.problems and not gpus):
        reason = f"unreadable {label} ({source}): " + "; ".join(tree.problems)
        return GpuProbe(unavailable_snapshot("smi", reason), (Note("gpu.smi", reason),))
    root = tree.root
    devices = tuple(parse_gpu(gpu, i) for i, gpu in enumerate(gpus))
    notes = [Note("gpu.smi", f"partial {label} ({source}): {problem}") for problem in tree.problems]
    attached = read_int(_text(root, "attached_gpus"), low=0, high=1_000_000)
    if attached is not None and attached != len(devices):
        notes.append(Note("gpu.smi", f"attached_gpus says {attached} but the report lists {len(devices)} GPUs"))
    snapshot = GpuSnapshot(
        backend="smi",
        source=source,
        driver_version=_version(root, "kmd_version", "driver_version"),
        cuda_version=_version(root, "cuda_umd_version", "cuda_version"),
        devices=devices,
        available=True,
        attached_gpus=attached,
    )
    return GpuProbe(snapshot, tuple(notes))


def _version(root: ET.Element, *paths: str) -> str | None:
    """``610.62 [Deprecated; ...]`` -> ``610.62``: the first present path, without a trailing remark."""
    for path in paths:
        text = _text(root, path)
        if text:
            return text.split(" [", 1)[0].strip() or None
    return None


def find_nvidia_smi() -> str | None:
    """Path of the ``nvidia-smi`` binary, or None."""
    return shutil.which("nvidia-smi")


def read_report_file(path: Path) -> bytes:
    """A saved report's bytes, at most :data:`~.smi_tree.MAX_DOCUMENT_BYTES` plus one (so a cut can be said)."""
    with path.open("rb") as handle:
        return handle.read(MAX_DOCUMENT_BYTES + 1)


class SmiXmlBackend(GpuBackend):
    """Runs ``nvidia-smi -q -x`` (or reads a saved ``-q -x`` or ``-q`` report) and parses it."""

    name = "smi"

    def __init__(self, *, binary: str | None = None, report_file: str | Path | None = None) -> None:
        self.binary = binary
        self.report_file = Path(report_file) if report_file is not None else None

    def sample(self) -> tuple[GpuDevice, ...]:
        """``nvidia-smi --query-gpu=... --format=csv,noheader,nounits``: far cheaper than the full XML each tick."""
        binary = self.binary or find_nvidia_smi()
        if self.report_file is not None or binary is None:
            return self.probe().snapshot.devices
        for reasons in REASON_FIELDS:
            argv = [binary, f"--query-gpu={','.join((*SAMPLE_FIELDS, reasons))}", "--format=csv,noheader,nounits"]
            proc = run_capture(argv, timeout=SMI_TIMEOUT_S)
            if proc.error is not None:
                return ()
            if proc.ok:
                return parse_query_csv(proc.stdout.decode("utf-8", "replace"))
        return self.probe().snapshot.devices

    def probe(self) -> GpuProbe:
        """``nvidia-smi -q -x``."""
        if self.report_file is not None:
            try:
                data = read_report_file(self.report_file)
            except OSError as exc:
                reason = f"cannot read {self.report_file}: {exc.strerror or exc}"
                return GpuProbe(unavailable_snapshot("smi", reason), (Note("gpu.smi", reason),))
            return parse_smi_report(data, source=str(self.report_file))
        binary = self.binary or find_nvidia_smi()
        if binary is None:
            reason = "nvidia-smi not found on PATH"
            return GpuProbe(unavailable_snapshot("smi", reason), (Note("gpu.smi", reason),))
        proc = run_capture([binary, "-q", "-x"], timeout=SMI_TIMEOUT_S)
        if not proc.ok:
            reason = f"nvidia-smi -q -x failed: {proc.reason()}"
            return GpuProbe(unavailable_snapshot("smi", reason), (Note("gpu.smi", reason),))
        return parse_smi_report(proc.stdout)


def _csv_number(text: str) -> float | None:
    text = text.strip()
    if not text or text.startswith("[") or text.upper() == "N/A":
        return None
    if text[:1] in "Pp" and text[1:].isdigit():  # pstate: P0 .. P15
        return read_float(text[1:], low=0.0, high=15.0)
    if text.lower().startswith("0x"):
        return float(int(text, 16)) if _is_hex(text[2:]) else None
    return read_float(text)


def _is_hex(text: str) -> bool:
    return 0 < len(text) <= 16 and all(c in "0123456789abcdefABCDEF" for c in text)


def parse_query_csv(text: str) -> tuple[GpuDevice, ...]:
    """Devices from ``--query-gpu`` CSV in :data:`SAMPLE_FIELDS` order plus the reasons bitmask (MiB, W, MHz)."""
    devices = []
    for line in text.splitlines()[:1024]:
        cells = [_csv_number(c) for c in line[:4096].split(",")]
        if len(cells) != len(SAMPLE_FIELDS) + 1:
            continue
        index, util, mem_util, used, total, temp, power, limit, sm, sm_max, pstate, reasons = cells
        if index is None or not 0 <= index < 1024 or index != int(index):
            continue
        devices.append(
            GpuDevice.blank(
                int(index),
                utilization_gpu_pct=util,
                utilization_memory_pct=mem_util,
                memory_used_bytes=None if used is None or not 0 <= used < 2**40 else int(used * 1024 * 1024),
                memory_total_bytes=None if total is None or not 0 <= total < 2**40 else int(total * 1024 * 1024),
                temperature_c=temp,
                power_draw_w=power,
                power_limit_w=limit,
                sm_clock_mhz=None if sm is None or not 0 <= sm < 2**31 else int(sm),
                max_sm_clock_mhz=None if sm_max is None or not 0 <= sm_max < 2**31 else int(sm_max),
                performance_state=None if pstate is None else int(pstate),
                clock_event_reasons=None if reasons is None else int(reasons),
            )
        )
    return tuple(devices)
