"""NVIDIA Xid codes: one table (meaning, origin, action, advice) and one kernel-line reader for every command.

``node`` (the kernel log of this machine, or ``--kernel-log FILE``) and ``logs`` (collected log files) read kernel
lines with :class:`KernelLineReader`, so the same line gives the same event, meaning, action and severity in both.
It reads ``NVRM: Xid`` lines wherever they sit in a line (bare, behind a dmesg, syslog, journal or ``dmesg --decode``
prefix, or quoted inside another tool's message), the "GPU has fallen off the bus" message the driver prints without
an Xid (reported as Xid 79, which means the same), and the root cause an Xid 45 names ("caused by previous Xid N").

A line looks like ``[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen
off the bus.``

The table covers every code in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
"Xid Catalog Reference", codes 1-172, read 2026-11) that is in use on Ampere and later GPUs, plus the older
codes 61 and 63's page-retirement wording. The action follows the catalog's "Resolution Bucket (Immediate
Action)": RESTART_APP -> restart app, RESET_GPU -> reset GPU, RESTART_BM/RESTART_VM -> reboot, IGNORE -> none, or
watch where the code is an early hardware warning (92 high single-bit ECC rate, 121 C2C, 137 NVLink privilege error,
non-fatal NVLink5 errors). Where the catalog names a workflow the action is what the workflow starts with: 45 (none:
act on the Xid it names), 48 (reset GPU), 74 (reset GPU), 144-150 (reset GPU for a line that says ``Fatal``, watch
for ``Nonfatal``), 154 (the recovery action the line names). The project's routing reference (G1) keeps 43 and 63 as
they were (restart the app; reset the GPU to apply a row remap, as the driver's own message says). Codes 162-172
have no bucket in the catalog yet; their actions are infradoctor's reading of the description.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from infradoctor.findings import Severity

ACTIONS = ("restart app", "reset GPU", "reboot", "drain", "watch", "none")
"""Every action a code can call for."""

SEVERITY_BY_ACTION: Mapping[str, Severity] = MappingProxyType({
    "reboot": Severity.CRITICAL,
    "drain": Severity.CRITICAL,
    "reset GPU": Severity.HIGH,
    "restart app": Severity.MEDIUM,
    "watch": Severity.MEDIUM,
    "none": Severity.LOW,
})
"""Severity of a finding from the action its Xid code calls for."""

ACTION_RANK: Mapping[str, int] = MappingProxyType({"none": 0, "watch": 1, "restart app": 2, "reset GPU": 3,
                                                   "drain": 4, "reboot": 5})
"""Actions from least to most disruptive (the most disruptive one seen for a code is reported)."""

MAX_ADDRESS_CHARS = 64
"""A PCI address in parentheses longer than this is not one (the device is reported as ``unknown``)."""
MAX_MESSAGE_CHARS = 500
"""The message after the code is cut to this many characters."""
UNKNOWN_DEVICE = "unknown"
"""The device of an Xid line whose address was redacted or unreadable (``PCI:...``)."""


@dataclass(frozen=True)
class XidInfo:
    """What one Xid code means and what to do about it."""

    code: int
    """Xid number."""
    meaning: str
    """NVIDIA's description, shortened."""
    origin: str
    """``application`` (the workload's fault), ``hardware``, ``driver``, ``application or hardware`` or
    ``unknown``."""
    action: str
    """One of :data:`ACTIONS`: ``restart app``, ``reset GPU``, ``reboot``, ``drain`` (take the node out of
    service), ``watch`` (an early warning: trend it), or ``none``."""
    advice: str
    """One sentence on what to do."""

    @property
    def hardware(self) -> bool:
        """True when the code points at the GPU, board or driver rather than the application."""
        return self.origin in ("hardware", "driver", "unknown")

    @property
    def severity(self) -> Severity:
        """Finding severity for this code (from its action)."""
        return SEVERITY_BY_ACTION.get(self.action, Severity.HIGH)


_APP = "application"
_HW = "hardware"
_DRV = "driver"
_EITHER = "application or hardware"
_RESTART_APP = "Restart the application; if it recurs without an application cause, reset the GPU."
_ENGINE_ADVICE = "Restart the application; update the driver and reset the GPU if it recurs."
_NVLINK5_ADVICE = ("Check the NVLink state (nvidia-smi nvlink -s / -e) and the fabric manager; a Fatal error needs a "
                   "GPU reset, repeated Non-fatal errors on one link mean a failing link or cable: drain and contact "
                   "the vendor.")

_XID_ROWS: list[tuple[int, str, str, str, str]] = [
    (8, "GPU stopped processing (timeout)", _EITHER, "restart app", _RESTART_APP),
    (11, "Invalid or corrupted push buffer stream", _APP, "restart app",
     "Restart the application and check its CUDA code; update the driver if it recurs."),
    (13, "Graphics engine exception (often an application bug: illegal address, out-of-range access)",
     _APP, "restart app",
     "Debug the application (run it under compute-sanitizer) and restart it; the GPU is healthy."),
    (25, "Invalid or illegal push buffer stream", _APP, "restart app",
     "Restart the application and check its CUDA code; update the driver if it recurs."),
    (31, "GPU memory page fault (illegal address in a kernel)", _APP, "restart app",
     "Debug the application (illegal memory access, compute-sanitizer); the GPU is healthy unless it recurs "
     "across jobs."),
    (32, "Invalid or corrupted push buffer stream (DMA)", _EITHER, "restart app",
     "Restart the application; check PCIe health (replay counter) and reset the GPU if it recurs."),
    (37, "Driver firmware error (unimplemented method)", _DRV, "none",
     "Nothing to do now; update the driver if it recurs."),
    (38, "Driver firmware error (watchdog timeout)", _DRV, "none",
     "Nothing to do now; update the driver if it recurs."),
    (43, "GPU stopped processing (the application hit a fault)", _APP, "restart app",
     "The faulting application was stopped; other work continues. Fix or restart the application."),
    (44, "Graphics engine fault during a context switch", _DRV, "none",
     "Nothing to do now; update the driver and contact the vendor if it recurs."),
    (45, "Preemptive cleanup after earlier errors (process killed or channel torn down)", _APP, "none",
     "Usually follows another Xid or a killed process; act on the Xid before it."),
    (46, "GPU stopped processing (GPU timeout)", _HW, "reset GPU",
     "Reset the GPU; contact the vendor if it recurs."),
    (48, "Double-bit ECC error (uncorrectable memory error)", _HW, "reset GPU",
     "Reset the GPU so the page is retired or the row remapped; drain the node and RMA the GPU if it recurs."),
    (54, "Auxiliary power is not connected to the GPU board", _HW, "drain",
     "Drain the node and reseat or connect the board's auxiliary power cables."),
    (60, "Video processor (SEC2) exception", _EITHER, "restart app", _ENGINE_ADVICE),
    (61, "Internal micro-controller breakpoint/warning (older GPUs)", _DRV, "reset GPU",
     "Reset the GPU; update the driver if it recurs."),
    (62, "Internal micro-controller halt", _HW, "reset GPU",
     "Reset the GPU; if it recurs, drain the node and contact the vendor."),
    (63, "ECC page retirement or row remapping recorded", _HW, "reset GPU",
     "A retirement/remap is pending: reset the GPU when idle to apply it."),
    (64, "ECC page retirement or row remapping failed", _HW, "reset GPU",
     "The GPU could not retire/remap memory: reset it, and drain and RMA if it recurs."),
    (66, "Illegal register access by the driver", _DRV, "none", "Update the driver if it recurs."),
    (67, "Illegal access by the driver (verification)", _DRV, "none", "Update the driver if it recurs."),
    (68, "Video processor (NVDEC) exception", _EITHER, "restart app", _ENGINE_ADVICE),
    (69, "Graphics engine class error", _EITHER, "restart app", _ENGINE_ADVICE),
    (74, "NVLink error", _HW, "reset GPU",
     "Reset the GPUs; check NVLink health and topology (nvidia-smi nvlink -e / -s); reseat or RMA if the link "
     "errors persist."),
    (78, "vGPU start error", _DRV, "reset GPU",
     "Update the vGPU manager and the guest driver so their versions match, then reset the GPU."),
    (79, "GPU has fallen off the bus", _HW, "reboot",
     "The GPU is unreachable: drain the node and reboot; check power, cooling and PCIe seating if it recurs."),
    (80, "Corrupted data sent to the GPU (push buffer CRC mismatch)", _EITHER, "restart app",
     "Restart the application; check PCIe health if it recurs."),
    (86, "Optical flow accelerator (OFA) exception", _EITHER, "restart app", _ENGINE_ADVICE),
    (92, "High single-bit ECC error rate", _HW, "watch",
     "Corrected errors, no data lost yet: trend the corrected-error counters and plan to drain and RMA if the "
     "rate keeps rising."),
    (93, "InfoROM wear limit exceeded (non-fatal)", _HW, "watch",
     "Nothing breaks now; contact the vendor to plan a board replacement."),
    (94, "Contained ECC error (the affected application was stopped)", _HW, "restart app",
     "Restart the affected application; reset the GPU when idle to remap the row."),
    (95, "Uncontained ECC error (every application on the GPU is affected)", _HW, "reset GPU",
     "Every process on the GPU is affected: drain the GPU, reset it now, and check remapped rows; RMA if "
     "remapping failed."),
    (106, "SMBPBI test message", _DRV, "none", "A test message from the management interface; nothing to do."),
    (107, "SMBPBI test message (silent)", _DRV, "none", "A test message from the management interface; nothing to do."),
    (108, "NVLink remote translation error", _HW, "none",
     "Nothing to do now; follow NVIDIA's Xid 137 workflow if it recurs."),
    (109, "Context switch timeout", _EITHER, "reset GPU", "Reset the GPU; update the driver if it recurs."),
    (110, "Security fault", _EITHER, "reset GPU", "Reset the GPU; check the software stack if it recurs."),
    (119, "GSP RPC timeout (GPU system processor did not answer)", _DRV, "reset GPU",
     "Reset the GPU; reboot if the reset fails; update the driver/firmware if it recurs."),
    (120, "GSP error", _DRV, "reset GPU",
     "Reset the GPU; reboot if the reset fails; update the driver/firmware if it recurs."),
    (121, "C2C link error (corrected)", _HW, "watch", "Corrected; watch for repeats and contact the vendor if they "
     "persist."),
    (136, "NVLink link training failed", _HW, "reset GPU",
     "Reset the GPU; check the link's signal integrity (cables, seating) if it recurs."),
    (137, "NVLink privilege error", _HW, "watch",
     "Nothing to do now; if it recurs, follow NVIDIA's Xid 137 workflow (check the NVLink configuration)."),
    (140, "Unrecovered ECC error", _HW, "reset GPU", "Reset the GPU; drain and RMA if it recurs."),
    (141, "CUDA fast path error", _DRV, "none", "Nothing to do now; contact the vendor if it recurs."),
    (142, "Video encoder (NVENC3) error", _EITHER, "restart app", _ENGINE_ADVICE),
    (143, "GPU initialisation failure", _HW, "reset GPU", "Reset the GPU; drain and RMA if it recurs."),
    (151, "Key rotation error (confidential computing)", _DRV, "reboot",
     "Restart the VM; contact the vendor if it recurs."),
    (152, "DLA SMMU error", _DRV, "none", "Nothing to do now; contact the vendor if it recurs."),
    (153, "DLA timeout", _DRV, "none", "Nothing to do now; contact the vendor if it recurs."),
    (154, "GPU recovery action changed", _DRV, "reset GPU",
     "Do what the message says (GPU reset, node reboot, or drain and reset)."),
    (155, "NVLink software-defined error", _DRV, "reset GPU", "Reset the GPU; check the software using NVLink."),
    (156, "Resource retirement event", _HW, "reset GPU", "Reset the GPU when idle to apply the retirement."),
    (157, "Resource retirement failure", _HW, "watch", "Contact the vendor; plan a replacement if it recurs."),
    (158, "GPU fatal timeout", _HW, "reset GPU", "Reset the GPU; contact the vendor if it recurs."),
    (159, "CHI non-data error", _EITHER, "restart app",
     "Restart the application and check unified memory (UVM) use; contact the vendor if it recurs alone."),
    (160, "Channel retirement event", _DRV, "none", "Nothing to do now; check the software if it recurs."),
    (161, "Channel retirement failure", _DRV, "none", "Nothing to do now; check the software if it recurs."),
    (162, "Power smoothing circuitry re-engaged", _HW, "none", "Informational; nothing to do."),
    (163, "Power smoothing circuitry disengaged", _HW, "watch", "Watch power behaviour; contact the vendor if it "
     "recurs."),
    (164, "Power smoothing circuitry low lifetime", _HW, "watch", "Plan a board replacement with the vendor."),
    (165, "Power smoothing circuitry lifetime exhausted", _HW, "drain", "Drain the node and replace the board."),
    (166, "NVLink encrypted traffic before the link was configured for it", _DRV, "reset GPU",
     "Reset the GPU and check the confidential-computing setup."),
    (167, "PCIe fatal timeout", _HW, "reboot", "Drain and reboot the node; check PCIe seating if it recurs."),
    (168, "Reduced GPU memory capacity (errors in the write-protected region)", _HW, "drain",
     "Drain the node and contact the vendor."),
    (169, "Internal micro-controller (SEC2) halt", _HW, "reset GPU",
     "Reset the GPU; if it recurs, drain the node and contact the vendor."),
    (170, "NVLink interrupt in confidential-computing mode", _DRV, "reset GPU",
     "Reset the GPU and check the confidential-computing setup."),
    (171, "Uncorrectable DRAM error (details of an Xid 48)", _HW, "reset GPU",
     "Act as for the Xid 48 it accompanies: reset the GPU; drain and RMA if it recurs."),
    (172, "Uncorrectable SRAM error (details of an Xid 48)", _HW, "reset GPU",
     "Act as for the Xid 48 it accompanies: reset the GPU; drain and RMA if it recurs."),
]
# Engine exceptions NVIDIA lists one per engine instance: same meaning, same action.
_XID_ROWS += [(code, f"Copy engine (CE) exception ({code})", _EITHER, "restart app", _ENGINE_ADVICE)
              for code in (39, 40, 41, 70, 71, 72, 75, 76, 77, 85, *range(126, 136))]
_XID_ROWS += [(code, "Video decoder (NVDEC) error", _EITHER, "restart app", _ENGINE_ADVICE)
              for code in (83, 84, 88, 89, 96, 97, 98)]
_XID_ROWS += [(code, "JPEG engine (NVJPG) error", _EITHER, "restart app", _ENGINE_ADVICE)
              for code in (82, *range(99, 106))]
_XID_ROWS += [(139, "Optical flow accelerator (OFA1) exception", _EITHER, "restart app", _ENGINE_ADVICE)]
_NVLINK5 = {144: "SAW", 145: "RLW", 146: "TLW", 147: "TREX", 148: "NVLPW_CTRL", 149: "NETIR", 150: "MSE"}
_XID_ROWS += [(code, f"NVLink {unit} error", _HW, "reset GPU", _NVLINK5_ADVICE) for code, unit in _NVLINK5.items()]

XID_CATALOG: Mapping[int, XidInfo] = MappingProxyType({row[0]: XidInfo(*row) for row in sorted(_XID_ROWS)})
"""Known Xid codes. Source: NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html);
see the module docstring for how its resolution buckets map to actions."""

RECOVERY_ACTIONS: Mapping[str, str] = MappingProxyType({
    "gpu reset required": "reset GPU",
    "node reboot required": "reboot",
    "drain and reset": "drain",
    "drain p2p": "drain",
    "none": "none",
})
"""Xid 154's recovery action names (``... to 0x1 (GPU Reset Required)``) and the action each means."""


def xid_info(code: int) -> XidInfo:
    """The catalog entry for a code; unknown codes get a conservative entry (reset the GPU, see NVIDIA's docs)."""
    found = XID_CATALOG.get(code)
    if found is not None:
        return found
    return XidInfo(code, f"Xid {code} (not in infradoctor's table)", "unknown", "reset GPU",
                   "Look the code up in NVIDIA's Xid catalog and collect nvidia-bug-report.sh; reset the GPU if "
                   "work on it fails.")


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid`` line from a kernel log (or a GPU that fell off the bus, reported as Xid 79)."""

    code: int
    """Xid number."""
    pci: str
    """PCI address as the kernel prints it, lower case, without ``PCI:``, e.g. ``0000:3b:00`` (``unknown`` when
    the line's address was redacted or unreadable)."""
    message: str
    """Text after the code (cut to :data:`MAX_MESSAGE_CHARS`)."""
    timestamp: str | None
    """The line's time stamp as printed (seconds since boot or a date), when present."""
    pid: int | None
    """Process id in the message, when present."""
    process_name: str | None
    """Process name in the message, when present."""
    line: int
    """1-based line number in the source (0 when not known)."""
    caused_by: int | None = None
    """The Xid an Xid 45 names as its cause (``caused by previous Xid 149``), when it names one."""
    without_xid: bool = False
    """True for "GPU has fallen off the bus" printed without an Xid line (reported as Xid 79)."""

    @property
    def info(self) -> XidInfo:
        """The table entry, with the action this line calls for where the line says more than its code."""
        return event_info(self.code, self.message)


def event_info(code: int, message: str) -> XidInfo:
    """:func:`xid_info`, refined by the line's message.

    NVLink5 errors (144-150) say ``Fatal`` (reset the GPU) or ``Nonfatal`` (watch); Xid 154 names the recovery action
    it changed to (``to 0x1 (GPU Reset Required)``).
    """
    info = xid_info(code)
    if code in _NVLINK5:
        words = message[:200].split()
        if "Nonfatal" in words or "Non-fatal" in words:
            return dataclasses.replace(info, action="watch")
        if "Fatal" in words:
            return dataclasses.replace(info, action="reset GPU")
        return info
    if code == 154:
        target = message.rfind(" to 0x")
        if target >= 0:
            open_at = message.find("(", target)
            close_at = message.find(")", open_at + 1) if open_at >= 0 else -1
            if 0 <= open_at < close_at <= open_at + 40:
                action = RECOVERY_ACTIONS.get(message[open_at + 1:close_at].strip().lower())
                if action is not None:
                    return dataclasses.replace(info, action=action)
    return info


def _hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


def normalise_pci(address: str | None) -> str | None:
    """``00000000:3B:00.0``, ``PCI:0000:3b:00`` and ``3b:00.0`` all become ``0000:3b:00`` (domain:bus:device).

    Linear in the input (it is cut to :data:`MAX_ADDRESS_CHARS` first); text that is not an address comes back
    lower-cased.
    """
    if not address:
        return None
    text = address.strip()[:MAX_ADDRESS_CHARS]
    if text[:4].upper() == "PCI:":
        text = text[4:]
    words = text.split()
    head = words[0].split(".")[0] if words else ""
    parts = head.split(":")
    if len(parts) >= 3:
        domain, bus, device = parts[-3:]
    elif len(parts) == 2:
        domain, (bus, device) = "0", parts
    else:
        return text.lower()
    if not (_hex(domain) and _hex(bus) and _hex(device) and len(bus) <= 2 and len(device) <= 2):
        return text.lower()
    return f"{domain[-4:].rjust(4, '0')}:{bus.rjust(2, '0')}:{device.rjust(2, '0')}".lower()


def _device(address: str) -> str:
    """The device of an Xid line's ``(PCI:...)``: the address lower-cased, or :data:`UNKNOWN_DEVICE`."""
    text = address.strip()
    if text[:4].upper() == "PCI:":
        text = text[4:]
    first = text.split()[0] if text.split() else ""
    return first.lower() if any(c in "0123456789abcdefABCDEF" for c in first) else UNKNOWN_DEVICE


_TIMESTAMP = re.compile(
    r"\s*(?:\[\s*(?P<mono>\d{1,12}\.\d{1,9})\]|(?P<iso>\d{4}-\d\d-\d\dT[\d:.,]{1,24}(?:Z|[+-]\d\d:?\d\d)?)"
    r"|(?P<syslog>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d))"
)
MAX_TIMESTAMP_SCAN = 80
"""Characters at the start of a line searched for its time stamp."""


def _leading_digits(text: str, limit: int = 6) -> str:
    end = 0
    while end < len(text) and end < limit and text[end].isdigit():
        end += 1
    return text[:end]


def _value_after(message: str, key: str) -> str | None:
    """The value of ``key=`` in the message (up to the next comma), quotes removed; None when absent."""
    at = message.find(key)
    if at < 0:
        return None
    end = message.find(",", at)
    value = message[at + len(key): end if end >= 0 else at + len(key) + 64].strip().strip("'\"")
    return value[:64]


def parse_xid_line(line: str, line_number: int = 0) -> XidEvent | None:
    """The Xid event in a kernel log line, or None when the line is not an Xid line.

    Linear in the line: ``NVRM: Xid (`` and the ``): `` that ends the address are found with ``str.find``; an
    address longer than :data:`MAX_ADDRESS_CHARS` is not one (the device is ``unknown``); the code is at most six
    digits.
    """
    at = line.find("NVRM: Xid")
    if at < 0:
        return None
    rest = line[at + 9:].lstrip(" ")
    if not rest.startswith("("):
        return None
    close = rest.find("): ", 1)
    if close < 0:
        return None
    after = rest[close + 3:]
    digits = _leading_digits(after)
    if not digits:
        return None
    message = after[len(digits):].lstrip(",").strip()[:MAX_MESSAGE_CHARS]
    pid_text = _value_after(message, "pid=")
    pid = int(pid_text) if pid_text and pid_text.isdigit() and len(pid_text) <= 10 else None
    name = _value_after(message, "name=")
    if name in ("<unknown>", ""):
        name = None
    caused_by = None
    cause_at = message.find("caused by previous Xid ")
    if cause_at >= 0:
        cause = _leading_digits(message[cause_at + 23:])
        caused_by = int(cause) if cause else None
    stamp = _TIMESTAMP.match(line[:MAX_TIMESTAMP_SCAN])
    timestamp = (stamp.group("mono") or stamp.group("iso") or stamp.group("syslog")) if stamp else None
    device = _device(rest[1:close]) if close <= MAX_ADDRESS_CHARS else UNKNOWN_DEVICE
    return XidEvent(code=int(digits), pci=device, message=message, timestamp=timestamp, pid=pid,
                    process_name=name, line=line_number, caused_by=caused_by)


BUS_DROP = "fallen off the bus"
"""What the driver prints when a GPU stops answering on PCIe (with or without an Xid 79)."""
_GPU_AT = ("NVRM: GPU at ", "NVRM: The NVIDIA GPU ", "NVRM: GPU ")
MULTI_LINE_SPAN = 4
"""Lines after ``NVRM: The NVIDIA GPU <address>`` in which its "fallen off the bus" continuation is looked for (and
after an Xid 79 in which a "fallen off the bus" message for the same GPU is the same failure)."""


def _address_after(line: str) -> str | None:
    """The PCI address after ``NVRM: GPU at`` / ``NVRM: The NVIDIA GPU`` in the line, normalised; None when absent."""
    for prefix in _GPU_AT:
        at = line.find(prefix)
        if at >= 0:
            words = line[at + len(prefix): at + len(prefix) + MAX_ADDRESS_CHARS].split()
            if words:
                address = normalise_pci(words[0].rstrip(":"))
                if address and address.count(":") == 2:
                    return address
    return None


class KernelLineReader:
    """Reads kernel log lines in order and yields GPU events: one reader for ``node`` and ``logs``.

    Xid lines give their event. "GPU has fallen off the bus" without an Xid gives an Xid 79 event
    (``without_xid``), on the same line (``NVRM: GPU at 0000:01:00.0 has fallen off the bus.``) or as the end of the
    driver's multi-line message that names the GPU a few lines before (``NVRM: The NVIDIA GPU 0000:b3:00.0`` ...
    ``NVRM: fallen off the bus and is not responding to commands.``).
    """

    def __init__(self) -> None:
        self._pending: str | None = None
        self._pending_left = 0
        self._recent_79: dict[str, int] = {}
        self._lines = 0
        self.repeated = False
        """True when the last line fed was a "fallen off the bus" message repeating an Xid 79 just read for the same
        GPU (no event: it is the same failure)."""

    def feed(self, line: str, line_number: int = 0) -> XidEvent | None:
        """The event this line completes, or None."""
        self._lines += 1
        self.repeated = False
        if "NVRM" not in line:
            self._pending_left = max(0, self._pending_left - 1)
            return None
        event = parse_xid_line(line, line_number)
        if event is not None:
            self._pending = None
            if event.code == 79:
                self._recent_79[normalise_pci(event.pci) or event.pci] = self._lines
                if len(self._recent_79) > 64:
                    self._recent_79.pop(next(iter(self._recent_79)))
            return event
        if BUS_DROP in line:
            device = _address_after(line) or (self._pending if self._pending_left > 0 else None)
            self._pending = None
            seen = self._recent_79.get(device or "")
            if seen is not None and self._lines - seen <= MULTI_LINE_SPAN:
                self.repeated = True
                return None
            stamp = _TIMESTAMP.match(line[:MAX_TIMESTAMP_SCAN])
            return XidEvent(code=79, pci=device or UNKNOWN_DEVICE, message=line.strip()[:MAX_MESSAGE_CHARS],
                            timestamp=(stamp.group("mono") or stamp.group("iso") or stamp.group("syslog"))
                            if stamp else None, pid=None, process_name=None, line=line_number, without_xid=True)
        if "NVRM: The NVIDIA GPU " in line:
            self._pending = _address_after(line)
            self._pending_left = MULTI_LINE_SPAN
        else:
            self._pending_left = max(0, self._pending_left - 1)
        return None

    def read(self, lines: Iterable[str]) -> list[XidEvent]:
        """Every event of ``lines`` (a convenience for tests and small inputs)."""
        return [e for n, line in enumerate(lines, start=1) if (e := self.feed(line, n)) is not None]
