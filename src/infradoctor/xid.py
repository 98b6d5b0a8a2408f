"""NVIDIA Xid codes: one table (meaning, origin, action, advice) and one kernel-line parser for every command.

``node`` (kernel log of this machine) and ``logs`` (collected log files) both read ``NVRM: Xid`` lines; they use
this module so that the same line gets the same meaning, action and severity in both.

A line looks like ``[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen
off the bus.``

Actions follow NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors) and the project's routing reference (G1):
13/31/43/45/68 are application errors; 48 (double-bit ECC) and 62/64/95/109/119/120/140 need a GPU reset; 79 (fallen
off the bus) needs a reboot; 92 (high single-bit ECC rate) means drain.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from infradoctor.findings import Severity

XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+),?\s*(?P<message>.*)$")
"""An ``NVRM: Xid (PCI:<address>): <code>, <message>`` line (the ``PCI:`` prefix is optional)."""
_PID = re.compile(r"pid=['\"]?(?P<pid>\d+|<unknown>)['\"]?")
_NAME = re.compile(r"name=(?P<name>[^,]+)")
_TIMESTAMP = re.compile(
    r"^\s*(?:\[\s*(?P<mono>\d+\.\d+)\]|(?P<iso>\d{4}-\d\d-\d\dT[\d:.,]+(?:Z|[+-]\d\d:?\d\d)?)"
    r"|(?P<syslog>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d))"
)

ACTIONS = ("restart app", "reset GPU", "reboot", "drain", "none")
"""Every action a code can call for."""

SEVERITY_BY_ACTION: Mapping[str, Severity] = MappingProxyType({
    "reboot": Severity.CRITICAL,
    "drain": Severity.CRITICAL,
    "reset GPU": Severity.HIGH,
    "restart app": Severity.MEDIUM,
    "none": Severity.LOW,
})
"""Severity of a finding from the action its Xid code calls for."""


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
    service), or ``none``."""
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


_XID_ROWS: tuple[tuple[int, str, str, str, str], ...] = (
    (8, "GPU stopped processing (timeout)", "application or hardware", "restart app",
     "Restart the application; if it recurs without an application cause, reset the GPU."),
    (13, "Graphics engine exception (often an application bug: illegal address, out-of-range access)",
     "application", "restart app",
     "Debug the application (run it under compute-sanitizer) and restart it; the GPU is healthy."),
    (31, "GPU memory page fault (illegal address in a kernel)", "application", "restart app",
     "Debug the application (illegal memory access, compute-sanitizer); the GPU is healthy unless it recurs "
     "across jobs."),
    (32, "Invalid or corrupted push buffer stream", "driver", "reset GPU",
     "Reset the GPU; check PCIe health (replay counter) if it recurs."),
    (38, "Driver firmware error", "driver", "reset GPU", "Reset the GPU; update the driver if it recurs."),
    (43, "GPU stopped processing (the application hit a fault)", "application", "restart app",
     "The faulting application was stopped; other work continues. Fix or restart the application."),
    (45, "Preemptive cleanup after earlier errors (process killed or channel torn down)", "application", "none",
     "Usually follows another Xid or a killed process; act on the Xid before it."),
    (48, "Double-bit ECC error (uncorrectable memory error)", "hardware", "reset GPU",
     "Reset the GPU so the page is retired or the row remapped; drain the node and RMA the GPU if it recurs."),
    (61, "Internal micro-controller breakpoint/warning", "driver", "reset GPU",
     "Reset the GPU; update the driver if it recurs."),
    (62, "Internal micro-controller halt", "hardware", "reset GPU",
     "Reset the GPU; if it recurs, drain the node and contact the vendor."),
    (63, "ECC page retirement or row remapping recorded", "hardware", "reset GPU",
     "A retirement/remap is pending: reset the GPU when idle to apply it."),
    (64, "ECC page retirement or row remapping failed", "hardware", "reset GPU",
     "The GPU could not retire/remap memory: reset it, and drain and RMA if it recurs."),
    (68, "Video processor (NVDEC) exception", "application or hardware", "restart app",
     "Restart the application; update the driver and reset the GPU if it recurs."),
    (69, "Graphics engine class error", "application or hardware", "restart app",
     "Restart the application; update the driver and reset the GPU if it recurs."),
    (74, "NVLink error", "hardware", "reset GPU",
     "Reset the GPUs; check NVLink health and topology (nvidia-smi nvlink -e / -s); reseat or RMA if the link "
     "errors persist."),
    (79, "GPU has fallen off the bus", "hardware", "reboot",
     "The GPU is unreachable: drain the node and reboot; check power, cooling and PCIe seating if it recurs."),
    (92, "High single-bit ECC error rate", "hardware", "drain",
     "Watch the corrected-error counters; plan to drain and RMA if the rate keeps rising."),
    (94, "Contained ECC error (the affected application was stopped)", "hardware", "restart app",
     "Restart the affected application; reset the GPU when idle to remap the row."),
    (95, "Uncontained ECC error (every application on the GPU is affected)", "hardware", "reset GPU",
     "Every process on the GPU is affected: drain the GPU, reset it now, and check remapped rows; RMA if "
     "remapping failed."),
    (109, "Context switch timeout", "application or hardware", "reset GPU",
     "Reset the GPU; update the driver if it recurs."),
    (119, "GSP RPC timeout (GPU system processor did not answer)", "driver", "reset GPU",
     "Reset the GPU; reboot if the reset fails; update the driver/firmware if it recurs."),
    (120, "GSP error", "driver", "reset GPU",
     "Reset the GPU; reboot if the reset fails; update the driver/firmware if it recurs."),
    (121, "C2C link corrected error", "hardware", "none", "Corrected; watch for repeats."),
    (140, "Unrecovered ECC error", "hardware", "reset GPU", "Reset the GPU; drain and RMA if it recurs."),
    (143, "GPU initialisation failure", "hardware", "reboot", "Reboot the node; drain and RMA if it recurs."),
    (154, "GPU recovery action changed", "driver", "reset GPU",
     "Do what the message says (GPU reset, node reboot, or drain and reset)."),
)

XID_CATALOG: Mapping[int, XidInfo] = MappingProxyType({row[0]: XidInfo(*row) for row in _XID_ROWS})
"""Known Xid codes. Source: NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)."""


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
    """One ``NVRM: Xid`` line from a kernel log."""

    code: int
    """Xid number."""
    pci: str
    """PCI address as the kernel prints it, lower case, without ``PCI:``, e.g. ``0000:3b:00``."""
    message: str
    """Text after the code."""
    timestamp: str | None
    """The line's time stamp as printed (seconds since boot or a date), when present."""
    pid: int | None
    """Process id in the message, when present."""
    process_name: str | None
    """Process name in the message, when present."""
    line: int
    """1-based line number in the source (0 when not known)."""


def parse_xid_line(line: str, line_number: int = 0) -> XidEvent | None:
    """The Xid event in a kernel log line, or None when the line is not an Xid line."""
    match = XID_LINE.search(line)
    if match is None:
        return None
    message = match.group("message").strip()
    pid_match = _PID.search(message)
    pid = int(pid_match.group("pid")) if pid_match and pid_match.group("pid").isdigit() else None
    name_match = _NAME.search(message)
    name = name_match.group("name").strip() if name_match else None
    if name in ("<unknown>", ""):
        name = None
    stamp = _TIMESTAMP.match(line)
    timestamp = None
    if stamp:
        timestamp = stamp.group("mono") or stamp.group("iso") or stamp.group("syslog")
    return XidEvent(
        code=int(match.group("code")),
        pci=match.group("pci").lower(),
        message=message,
        timestamp=timestamp,
        pid=pid,
        process_name=name,
        line=line_number,
    )
