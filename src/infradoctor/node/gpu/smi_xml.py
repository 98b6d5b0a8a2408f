"""GPU state from ``nvidia-smi -q -x``: the fallback when the NVML library cannot be loaded from Python.

Reads the XML of drivers old and new: ``<clocks_event_reasons>`` (R535 and later) and ``<clocks_throttle_reasons>``
(older), ``<gpu_power_readings>`` and ``<power_readings>``, ECC counters as ``sram_/dram_(un)correctable`` or as the
older ``single_bit``/``double_bit`` totals. "N/A" and missing elements become None. A document that is not XML, or
not an ``nvidia_smi_log``, yields an unavailable snapshot and a note, never an exception.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from infradoctor.node.evidence import EccCounts, GpuDevice, GpuProcess, GpuSnapshot, Note
from infradoctor.node.gpu.base import REASON_BY_NAME, GpuBackend, GpuProbe, empty_device, unavailable_snapshot
from infradoctor.procs import run_capture

SMI_TIMEOUT_S = 15.0
"""Longest wait for ``nvidia-smi -q -x`` (a hung driver makes it block)."""
SAMPLE_FIELDS = ("index", "utilization.gpu", "utilization.memory", "memory.used", "memory.total", "temperature.gpu",
                 "power.draw", "power.limit", "clocks.sm")
"""``--query-gpu`` fields of a watch sample, followed by the clock event reasons field."""
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
"""The reasons field as drivers from R535 name it, then as older drivers do."""

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_UNIT_BYTES = {"B": 1, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3, "KB": 1000, "MB": 1000**2, "GB": 1000**3}


def _find(element: ET.Element | None, path: str) -> ET.Element | None:
    return None if element is None else element.find(path)


def _text(element: ET.Element | None, path: str) -> str | None:
    """Stripped text of ``path`` below ``element``; None for missing, empty or ``N/A`` values."""
    node = _find(element, path)
    if node is None or node.text is None:
        return None
    text = node.text.strip()
    if not text or text.upper() in ("N/A", "[N/A]", "NOT SUPPORTED", "[NOT SUPPORTED]", "UNKNOWN ERROR"):
        return None
    return text


def _number(element: ET.Element | None, *paths: str) -> float | None:
    """The first number in the first present path (``"45 C"`` -> 45.0, ``"16x"`` -> 16.0)."""
    for path in paths:
        text = _text(element, path)
        if text is None:
            continue
        match = _NUMBER.search(text)
        if match:
            return float(match.group())
    return None


def _int(element: ET.Element | None, *paths: str) -> int | None:
    value = _number(element, *paths)
    return None if value is None else int(value)


def _bytes(element: ET.Element | None, path: str) -> int | None:
    """``"81559 MiB"`` -> bytes."""
    text = _text(element, path)
    if text is None:
        return None
    match = re.fullmatch(r"\s*([\d.]+)\s*([A-Za-z]*)\s*", text)
    if not match:
        return None
    unit = _UNIT_BYTES.get(match.group(2).upper() or "MIB")
    return None if unit is None else int(float(match.group(1)) * unit)


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
            state = (child.text or "").strip().lower()
            if reason is None or state not in ("active", "not active"):
                continue
            seen = True
            if state == "active":
                mask |= reason.bit
        return mask if seen else None
    return None


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


def _processes(gpu: ET.Element) -> tuple[GpuProcess, ...]:
    out: list[GpuProcess] = []
    for info in gpu.findall("processes/process_info"):
        pid = _int(info, "pid")
        if pid is None:
            continue
        kind = _text(info, "type") or "C"
        out.append(
            GpuProcess(
                pid=pid,
                name=_text(info, "process_name"),
                used_memory_bytes=_bytes(info, "used_memory"),
                kind="graphics" if kind.upper() == "G" else "compute",
            )
        )
    return tuple(out)


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
    device = GpuDevice(
        index=index,
        name=_text(gpu, "product_name"),
        uuid=_text(gpu, "uuid"),
        pci_bus_id=_text(gpu, "pci/pci_bus_id") or gpu.get("id"),
        utilization_gpu_pct=_number(gpu, "utilization/gpu_util"),
        utilization_memory_pct=_number(gpu, "utilization/memory_util"),
        memory_used_bytes=_bytes(gpu, "fb_memory_usage/used"),
        memory_total_bytes=_bytes(gpu, "fb_memory_usage/total"),
        temperature_c=_number(gpu, "temperature/gpu_temp"),
        power_draw_w=_number(power, "power_draw", "instant_power_draw", "average_power_draw"),
        power_limit_w=_number(power, "current_power_limit", "enforced_power_limit", "power_limit"),
        sm_clock_mhz=_int(gpu, "clocks/sm_clock"),
        max_sm_clock_mhz=_int(gpu, "max_clocks/sm_clock"),
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
        processes=_processes(gpu),
        unavailable=unavailable,
    )
    for field in ("name", "memory_total_bytes", "temperature_c", "clock_event_reasons", "pcie_width_current"):
        if getattr(device, field) is None:
            unavailable[field] = "N/A or missing in nvidia-smi XML"
    return device


def parse_smi_xml(text: str | bytes, *, source: str = "nvidia-smi -q -x") -> GpuProbe:
    """A snapshot from ``nvidia-smi -q -x`` output; malformed input gives an unavailable snapshot and a note."""
    try:
        # nvidia-smi prints a DOCTYPE that names an external DTD; ElementTree never fetches it.
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        reason = f"malformed nvidia-smi XML ({source}): {exc}"
        return GpuProbe(unavailable_snapshot("smi", reason), (Note("gpu.smi", reason),))
    if root.tag != "nvidia_smi_log":
        reason = f"not nvidia-smi -q -x output ({source}): root element <{root.tag}>"
        return GpuProbe(unavailable_snapshot("smi", reason), (Note("gpu.smi", reason),))
    devices = tuple(parse_gpu(gpu, i) for i, gpu in enumerate(root.findall("gpu")))
    notes: list[Note] = []
    attached = _int(root, "attached_gpus")
    if attached is not None and attached != len(devices):
        notes.append(Note("gpu.smi", f"attached_gpus says {attached} but the XML lists {len(devices)} <gpu>"))
    snapshot = GpuSnapshot(
        backend="smi",
        source=source,
        driver_version=_text(root, "driver_version"),
        cuda_version=_text(root, "cuda_version"),
        devices=devices,
        available=True,
    )
    return GpuProbe(snapshot, tuple(notes))


def find_nvidia_smi() -> str | None:
    """Path of the ``nvidia-smi`` binary, or None."""
    return shutil.which("nvidia-smi")


class SmiXmlBackend(GpuBackend):
    """Runs ``nvidia-smi -q -x`` (or reads a saved document) and parses it."""

    name = "smi"

    def __init__(self, *, binary: str | None = None, xml_file: str | Path | None = None) -> None:
        self.binary = binary
        self.xml_file = Path(xml_file) if xml_file is not None else None

    def sample(self) -> tuple[GpuDevice, ...]:
        """``nvidia-smi --query-gpu=... --format=csv,noheader,nounits``: far cheaper than the full XML each tick."""
        binary = self.binary or find_nvidia_smi()
        if self.xml_file is not None or binary is None:
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
        if self.xml_file is not None:
            try:
                data = self.xml_file.read_bytes()
            except OSError as exc:
                reason = f"cannot read {self.xml_file}: {exc.strerror or exc}"
                return GpuProbe(unavailable_snapshot("smi", reason), (Note("gpu.smi", reason),))
            return parse_smi_xml(data, source=str(self.xml_file))
        binary = self.binary or find_nvidia_smi()
        if binary is None:
            reason = "nvidia-smi not found on PATH"
            return GpuProbe(unavailable_snapshot("smi", reason), (Note("gpu.smi", reason),))
        proc = run_capture([binary, "-q", "-x"], timeout=SMI_TIMEOUT_S)
        if not proc.ok:
            reason = f"nvidia-smi -q -x failed: {proc.reason()}"
            return GpuProbe(unavailable_snapshot("smi", reason), (Note("gpu.smi", reason),))
        return parse_smi_xml(proc.stdout)


def _csv_number(text: str) -> float | None:
    text = text.strip()
    if not text or text.startswith("[") or text.upper() == "N/A":
        return None
    try:
        return float(int(text, 16)) if text.lower().startswith("0x") else float(text)
    except ValueError:
        return None


def parse_query_csv(text: str) -> tuple[GpuDevice, ...]:
    """Devices from ``--query-gpu`` CSV in :data:`SAMPLE_FIELDS` order plus the reasons bitmask (MiB, W, MHz)."""
    devices = []
    for line in text.splitlines():
        cells = [_csv_number(c) for c in line.split(",")]
        if len(cells) != len(SAMPLE_FIELDS) + 1:
            continue
        index, util, mem_util, used, total, temp, power, limit, sm, reasons = cells
        if index is None:
            continue
        devices.append(
            empty_device(
                int(index),
                utilization_gpu_pct=util,
                utilization_memory_pct=mem_util,
                memory_used_bytes=None if used is None else int(used * 1024 * 1024),
                memory_total_bytes=None if total is None else int(total * 1024 * 1024),
                temperature_c=temp,
                power_draw_w=power,
                power_limit_w=limit,
                sm_clock_mhz=None if sm is None else int(sm),
                clock_event_reasons=None if reasons is None else int(reasons),
            )
        )
    return tuple(devices)
