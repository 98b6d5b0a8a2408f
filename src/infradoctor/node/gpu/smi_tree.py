"""nvidia-smi's reports (``-q -x`` XML and ``-q`` text) read into one element tree, hardened and bounded.

Both front-ends give the tree of ``nvidia-smi -q -x`` (``<nvidia_smi_log>`` with one ``<gpu>`` per GPU and the XML
element names), so one reader (:mod:`.smi_xml`) turns either into evidence:

- **XML** goes through expat with no DTD and no entities: a document that declares an internal DTD subset or an
  entity is refused before its body is parsed (nvidia-smi only names an external DTD, which is never fetched).
  The body is parsed in chunks by expat and the C tree builder with caps on size (:data:`MAX_DOCUMENT_BYTES`),
  elements (:data:`MAX_ELEMENTS`, counted before parsing) and GPUs (:data:`MAX_GPUS`); beyond a cap, or when
  the document is cut short or malformed part-way, the GPUs read completely so far are kept and the problem is
  said.
- **Text** (``nvidia-smi -q``, recognised by its ``==============NVSMI LOG==============`` banner) is read by
  indentation; each ``Label : value`` line becomes an element named as the XML names it (``Replays Since Reset``
  -> ``replay_counter``, ``GPU Current Temp`` -> ``gpu_temp`` ...), and the few sections laid out differently
  (processes, MIG devices, clock event reasons, retired pages) are rebuilt in the XML's shape.

Values are cut to :data:`MAX_TEXT_CHARS` where they are read (text lines as they are split, XML values and attributes
by the reader in :mod:`.smi_xml`); time and memory are linear in the input.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from xml.parsers import expat

MAX_DOCUMENT_BYTES = 16 * 1024 * 1024
"""Input read at most (a real 16-GPU document is about 0.5 MB); the rest is ignored, with a note."""
MAX_ELEMENTS = 128_000
"""Tags (XML: start, end or empty-element, so 64,000 elements or more) or lines (text) read at most: a GPU takes
about 500 elements, so 64 GPUs with their processes fit."""
MAX_DEPTH = 32
"""Nesting of text read at most (nvidia-smi nests 6 deep)."""
MAX_GPUS = 64
"""GPUs kept per document; more are counted and dropped."""
MAX_TEXT_CHARS = 512
"""Characters kept of one value (names, paths); longer values are cut."""
MAX_LINE_CHARS = 4096
"""Characters read of one text line."""

TEXT_BANNER = "NVSMI LOG"
"""The banner that starts ``nvidia-smi -q`` text (other vendors' look-alikes print their own)."""

_CHUNK = 1 << 16
_GPU_HEADER = re.compile(r"GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_NOT_NAME = re.compile(r"[^a-z0-9]+")


@dataclass
class SmiTree:
    """What a front-end read: the ``<nvidia_smi_log>`` tree (or None) and what it had to cut or skip."""

    root: ET.Element | None
    """The document's root, in ``-q -x`` shape; None when nothing usable was found."""
    format: str
    """``xml``, ``text``, or ``unknown`` (neither)."""
    problems: list[str] = field(default_factory=list)
    """Why the tree is partial or missing, one sentence each."""


def read_tree(data: bytes | str) -> SmiTree:
    """The tree of an ``nvidia-smi -q -x`` or ``nvidia-smi -q`` document (the format is recognised, not given)."""
    problems: list[str] = []
    if len(data) > MAX_DOCUMENT_BYTES:
        problems.append(f"the document has {len(data)} bytes; read the first {MAX_DOCUMENT_BYTES}")
        data = data[:MAX_DOCUMENT_BYTES]
    head = data[:4096]
    head_text = head.decode("utf-8", "replace") if isinstance(head, bytes) else head
    utf16 = isinstance(head, bytes) and head[:2] in (b"\xff\xfe", b"\xfe\xff")
    if utf16 or head_text.lstrip("\ufeff \t\r\n").startswith("<"):
        tree = read_xml_tree(data)
    elif TEXT_BANNER in head_text:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        tree = read_text_tree(text)
    else:
        first = next((line.strip() for line in head_text.splitlines() if line.strip()), "")[:80]
        tree = SmiTree(None, "unknown", [f"not an nvidia-smi report (neither `-q -x` XML nor `-q` text); it starts "
                                         f"with {first!r}"])
    tree.problems[:0] = problems
    return tree


# ---------------------------------------------------------------------------------------------------------------
# XML


class _Refused(Exception):
    """The prolog declares what nvidia-smi never does (an internal DTD subset, an entity)."""


class _PrologEnd(Exception):
    """The root element started: the prolog is over."""


def _chunks(data: bytes | str) -> Iterator[bytes | str]:
    for start in range(0, len(data), _CHUNK):
        yield data[start:start + _CHUNK]


def read_prolog(data: bytes | str) -> tuple[str | None, str | None]:
    """(why the document must not be parsed, or None; the root element's name, or None when there is none).

    Refused: a DTD internal subset or an entity declaration. Entities can only be declared in the DTD, and the
    internal subset is the only DTD expat reads here: refusing it before the root element leaves the body nothing
    to expand (no billion laughs, no 2 MB entity referenced 90 times, no external entity).
    """
    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    root: list[str] = []

    def doctype(name: str, system_id: str | None, public_id: str | None, has_internal_subset: int) -> None:
        if has_internal_subset:
            raise _Refused("a DOCTYPE with an internal subset (DTD declarations)")

    def entity(*_: object) -> None:
        raise _Refused("an ENTITY")

    def start(name: str, attributes: object) -> None:
        root.append(name[:60])
        raise _PrologEnd

    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = entity
    parser.UnparsedEntityDeclHandler = entity
    parser.StartElementHandler = start
    try:
        for chunk in _chunks(data):
            parser.Parse(chunk, False)
        parser.Parse(b"", True)
    except _PrologEnd:
        pass
    except _Refused as refused:
        return f"refused: the document declares {refused}, which nvidia-smi never writes", None
    except expat.ExpatError:
        pass  # malformed: the body parse says where
    return None, root[0] if root else None


def _cap_elements(data: bytes | str) -> tuple[bytes | str, bool]:
    """``data`` cut before its tag beyond :data:`MAX_ELEMENTS` (counting ``<``, one per tag), and whether cut."""
    marker = b"<" if isinstance(data, bytes) else "<"
    budget = MAX_ELEMENTS + 1
    for start in range(0, len(data), _CHUNK):
        chunk = data[start:start + _CHUNK]
        count = chunk.count(marker)  # type: ignore[arg-type]
        if count < budget:
            budget -= count
            continue
        at = -1
        for _ in range(budget):
            at = chunk.find(marker, at + 1)  # type: ignore[arg-type]
        return data[:start + at], True
    return data, False


def _offset(data: bytes | str, line: int, column: int) -> int:
    """The offset of expat's (1-based line, 0-based column) in ``data`` (split in C, not line by line)."""
    if line <= 1:
        return min(len(data), column)
    newline = b"\n" if isinstance(data, bytes) else "\n"
    rest = data.split(newline, line - 1)[-1]  # type: ignore[arg-type]
    return min(len(data), len(data) - len(rest) + column)


def read_xml_tree(data: bytes | str) -> SmiTree:
    """The ``<nvidia_smi_log>`` tree of an XML document, within the caps; complete GPUs survive a bad ending.

    The body is parsed by expat and the C tree builder in chunks, nothing per element in Python, so time is
    linear in the input and memory is bounded by :data:`MAX_ELEMENTS`.
    """
    refusal, root_tag = read_prolog(data)
    if refusal is not None:
        return SmiTree(None, "xml", [refusal])
    if root_tag is not None and root_tag != "nvidia_smi_log":
        return SmiTree(None, "xml", [f"not nvidia-smi -q -x output: root element <{root_tag}>"])
    problems: list[str] = []
    data, cut = _cap_elements(data)
    if cut:
        problems.append(f"more than {MAX_ELEMENTS} tags; read the first {MAX_ELEMENTS}")
    builder = ET.TreeBuilder()
    parser = ET.XMLParser(target=builder)
    parsed = len(data)
    try:
        for chunk in _chunks(data):
            parser.feed(chunk)
        parser.close()
    except ET.ParseError as exc:
        line, column = getattr(exc, "position", (0, 0))
        parsed = _offset(data, line, column)
        if not cut:  # a cut document ends inside an element: that error is the cut, already said
            problems.append(f"malformed XML: {exc}")
    root = builder.close()
    if root is None:
        return SmiTree(None, "xml", problems or ["no XML element found"])
    gpus = root.findall("gpu")
    keep = len(gpus)
    if problems:
        keep = data[:parsed].count(b"</gpu>" if isinstance(data, bytes) else "</gpu>")  # type: ignore[arg-type]
        problems[-1] += f"; kept the {min(keep, len(gpus))} GPUs read completely before it"
    if min(keep, len(gpus)) > MAX_GPUS:
        problems.append(f"{min(keep, len(gpus))} <gpu> elements; kept the first {MAX_GPUS}")
    keep = min(keep, MAX_GPUS)
    if keep < len(gpus):
        dropped = {id(g) for g in gpus[keep:]}
        root[:] = [child for child in root if id(child) not in dropped]  # one pass: remove() is linear each
    return SmiTree(root, "xml", problems)


# ---------------------------------------------------------------------------------------------------------------
# Text

# (parent element, label as a name) -> the XML element name, where the two differ.
_TEXT_NAMES: dict[tuple[str, str], str] = {
    ("gpu", "gpu_uuid"): "uuid",
    ("gpu", "serial_number"): "serial",
    ("mig_mode", "current"): "current_mig",
    ("mig_mode", "pending"): "pending_mig",
    ("ecc_mode", "current"): "current_ecc",
    ("ecc_mode", "pending"): "pending_ecc",
    ("driver_model", "current"): "current_dm",
    ("driver_model", "pending"): "pending_dm",
    ("pci", "bus_id"): "pci_bus_id",
    ("pci", "gpu_link_info"): "pci_gpu_link_info",
    ("pci", "replays_since_reset"): "replay_counter",
    ("pci", "replay_number_rollovers"): "replay_rollover_counter",
    ("pci_gpu_link_info", "pcie_generation"): "pcie_gen",
    ("pci_gpu_link_info", "link_width"): "link_widths",
    ("pcie_gen", "max"): "max_link_gen",
    ("pcie_gen", "current"): "current_link_gen",
    ("pcie_gen", "device_current"): "device_current_link_gen",
    ("pcie_gen", "device_max"): "max_device_link_gen",
    ("pcie_gen", "host_max"): "max_host_link_gen",
    ("link_widths", "max"): "max_link_width",
    ("link_widths", "current"): "current_link_width",
    ("utilization", "gpu"): "gpu_util",
    ("utilization", "memory"): "memory_util",
    ("temperature", "gpu_current_temp"): "gpu_temp",
    ("clocks", "graphics"): "graphics_clock",
    ("clocks", "sm"): "sm_clock",
    ("clocks", "memory"): "mem_clock",
    ("clocks", "video"): "video_clock",
    ("max_clocks", "graphics"): "graphics_clock",
    ("max_clocks", "sm"): "sm_clock",
    ("max_clocks", "memory"): "mem_clock",
    ("max_clocks", "video"): "video_clock",
    ("gpu_power_readings", "instantaneous_power_draw"): "instant_power_draw",
    ("power_readings", "instantaneous_power_draw"): "instant_power_draw",
    ("remapped_rows", "correctable_error"): "remapped_row_corr",
    ("remapped_rows", "uncorrectable_error"): "remapped_row_unc",
    ("remapped_rows", "pending"): "remapped_row_pending",
    ("remapped_rows", "remapping_failure_occurred"): "remapped_row_failure",
    ("retired_pages", "pending_page_blacklist"): "pending_blacklist",
    ("retired_pages", "pending_page_retirement"): "pending_retirement",
    ("mig_device", "shared_fb_memory_usage"): "fb_memory_usage",
    ("mig_device", "ecc_errors"): "ecc_error_count",
    ("process_id", "name"): "process_name",
    ("process_id", "used_gpu_memory"): "used_memory",
}

# Clock event reason labels of the text -> the reason names of the XML (``clocks_event_reason_<name>``).
_TEXT_REASONS = {
    "idle": "gpu_idle",
    "applications_clocks_setting": "applications_clocks_setting",
    "sw_power_cap": "sw_power_cap",
    "hw_slowdown": "hw_slowdown",
    "hw_thermal_slowdown": "hw_thermal_slowdown",
    "hw_power_brake_slowdown": "hw_power_brake_slowdown",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal_slowdown",
    "display_clock_setting": "display_clocks_setting",
}

# Clock event reason counter labels -> the XML's ``clocks_event_reasons_counters_<name>``.
_TEXT_COUNTERS = {
    "sw_power_capping": "sw_power_cap",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_therm_slowdown",
    "hw_thermal_slowdown": "hw_therm_slowdown",
    "hw_power_braking": "hw_power_brake",
}


def text_name(label: str) -> str:
    """``Replays Since Reset`` -> ``replays_since_reset`` (lower case, runs of other characters as ``_``)."""
    name = _NOT_NAME.sub("_", label[:80].lower()).strip("_")
    return name or "field"


def read_text_tree(text: str) -> SmiTree:
    """The ``-q -x``-shaped tree of ``nvidia-smi -q`` text; unknown labels keep their own names."""
    root = ET.Element("nvidia_smi_log")
    stack: list[tuple[int, ET.Element]] = []
    problems: list[str] = []
    gpus = dropped = lines = 0
    skipping = False
    for raw in text.splitlines():
        line = raw[:MAX_LINE_CHARS].rstrip()
        stripped = line.lstrip(" \t")
        if not stripped or stripped.startswith("=="):
            continue
        lines += 1
        if lines > MAX_ELEMENTS:
            problems.append(f"more than {MAX_ELEMENTS} lines; read the first {MAX_ELEMENTS}")
            break
        indent = len(line) - len(stripped)
        label, value = _split(stripped)
        if indent == 0 and value is None and _GPU_HEADER.fullmatch(label):
            stack.clear()
            if gpus >= MAX_GPUS:
                dropped += 1
                skipping = True
                continue
            skipping = False
            gpus += 1
            gpu = ET.SubElement(root, "gpu", id=label[4:])
            stack.append((0, gpu))
            continue
        if skipping and indent > 0:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if indent == 0:
            stack.clear()
            skipping = False
        parent = stack[-1][1] if stack else root
        if len(stack) >= MAX_DEPTH:
            continue
        name = text_name(label)
        element = ET.SubElement(parent, _TEXT_NAMES.get((parent.tag, name), name))
        element.text = value[:MAX_TEXT_CHARS] if value else None
        stack.append((indent, element))
    if dropped:
        problems.append(f"{gpus + dropped} GPU sections; kept the first {MAX_GPUS}")
    for gpu in root.findall("gpu"):
        _reshape_gpu(gpu)
    return SmiTree(root, "text", problems)


def _split(line: str) -> tuple[str, str | None]:
    """``Label    : value`` -> (label, value); a section header has no value (None)."""
    at = line.find(" :")
    if at < 0:
        if line.endswith(":"):
            return line[:-1].strip(), ""
        return line, None
    return line[:at].strip(), line[at + 2:].strip()


def _reshape_gpu(gpu: ET.Element) -> None:
    """Rebuild the sections the text lays out differently from the XML."""
    migs = gpu.findall("mig_device")
    if migs:
        container = ET.SubElement(gpu, "mig_devices")
        for mig in migs:
            gpu.remove(mig)
            container.append(mig)
    for tag, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                        ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        block = gpu.find(tag)
        if block is not None:
            _flatten(block, prefix, _TEXT_REASONS)
    counters = gpu.find("clocks_event_reasons_counters")
    if counters is not None:
        _flatten(counters, "clocks_event_reasons_counters_", _TEXT_COUNTERS)
    retired = gpu.find("retired_pages")
    if retired is not None:
        for label, tag in (("single_bit_ecc", "multiple_single_bit_retirement"),
                           ("double_bit_ecc", "double_bit_retirement")):
            count = retired.find(label)
            if count is not None:
                ET.SubElement(ET.SubElement(retired, tag), "retired_count").text = count.text
    processes = gpu.find("processes")
    if processes is not None:
        _group_processes(processes)


def _flatten(block: ET.Element, prefix: str, names: dict[str, str]) -> None:
    """Every known label below ``block`` (at any depth) as a direct child named ``prefix + name``."""
    found = [(names[e.tag], e.text) for e in block.iter() if e is not block and e.tag in names]
    for child in list(block):
        block.remove(child)
    for name, text in found:
        ET.SubElement(block, prefix + name).text = text


def _group_processes(processes: ET.Element) -> None:
    """The text's flat ``GPU instance ID`` / ``Compute instance ID`` / ``Process ID`` runs as ``<process_info>``."""
    pending: dict[str, str | None] = {}
    infos: list[ET.Element] = []
    for child in list(processes):
        processes.remove(child)
        if child.tag in ("gpu_instance_id", "compute_instance_id"):
            pending[child.tag] = child.text
        elif child.tag == "process_id":
            info = ET.Element("process_info")
            for tag, text in pending.items():
                ET.SubElement(info, tag).text = text
            ET.SubElement(info, "pid").text = child.text
            for part in child:
                info.append(part)
            infos.append(info)
            pending = {}
    processes.extend(infos)
