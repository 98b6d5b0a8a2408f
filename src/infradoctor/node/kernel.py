"""GPU events from the kernel log: ``NVRM: Xid`` lines, and what each Xid code means and asks you to do.

Sources, first readable wins: ``dmesg``, ``journalctl -k`` (this boot), ``/var/log/kern.log``; or a file the user
names. Unreadable sources are "not available" with the reason, never an exception. Reading is bounded (the last
:data:`MAX_LINES` lines; at most :data:`MAX_EVENTS` events kept).

A line looks like ``[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen
off the bus.``
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from infradoctor.node.evidence import KernelLogEvidence, XidEvent

MAX_LINES = 200_000
"""Lines read from the end of a log."""
MAX_EVENTS = 1000
"""Xid events kept (oldest dropped first); all are counted."""
COMMAND_TIMEOUT_S = 5.0
"""Longest wait for ``dmesg`` / ``journalctl``."""
KERN_LOG_PATHS = ("/var/log/kern.log", "/var/log/messages")
"""Log files tried after the commands."""

XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+),?\s*(?P<message>.*)$")
_PID = re.compile(r"pid=['\"]?(?P<pid>\d+|<unknown>)['\"]?")
_NAME = re.compile(r"name=(?P<name>[^,]+)")
_TIMESTAMP = re.compile(
    r"^\s*(?:\[\s*(?P<mono>\d+\.\d+)\]|(?P<iso>\d{4}-\d\d-\d\dT[\d:.,]+(?:Z|[+-]\d\d:?\d\d)?)"
    r"|(?P<syslog>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d))"
)


@dataclass(frozen=True)
class XidInfo:
    """What one Xid code means and what to do about it."""

    code: int
    """Xid number."""
    meaning: str
    """NVIDIA's description, shortened."""
    origin: str
    """``application`` (the workload's fault), ``hardware``, ``driver``, or ``application or hardware``."""
    action: str
    """``restart app``, ``reset GPU``, ``reboot``, ``drain`` (take the node out of service), or ``none``."""
    advice: str
    """One sentence on what to do."""


_XID_ROWS: tuple[tuple[int, str, str, str, str], ...] = (
    (8, "GPU stopped processing (timeout)", "application or hardware", "restart app",
     "Restart the application; if it recurs without an application cause, reset the GPU."),
    (13, "Graphics engine exception (e.g. out-of-range access in a kernel)", "application", "restart app",
     "Debug the application (compute-sanitizer); the GPU is healthy."),
    (31, "GPU memory page fault (illegal address in a kernel)", "application", "restart app",
     "Debug the application (illegal memory access); the GPU is healthy unless it recurs across jobs."),
    (32, "Invalid or corrupted push buffer stream", "driver", "reset GPU",
     "Reset the GPU; check PCIe errors (replay counter) if it recurs."),
    (38, "Driver firmware error", "driver", "reset GPU", "Reset the GPU; update the driver if it recurs."),
    (43, "GPU stopped processing (the application hit a fault)", "application", "restart app",
     "The faulting application was stopped; other work continues. Fix or restart the application."),
    (45, "Preemptive cleanup after earlier errors (process killed or channel torn down)", "application", "none",
     "Usually follows another Xid or a killed process; act on the Xid before it."),
    (48, "Double-bit ECC error (uncorrectable memory error)", "hardware", "reset GPU",
     "Reset the GPU so the page is retired or the row remapped; drain and RMA if it recurs."),
    (61, "Internal micro-controller breakpoint/warning", "driver", "reset GPU", "Reset the GPU."),
    (62, "Internal micro-controller halt", "hardware", "reset GPU",
     "Reset the GPU; if it recurs, drain the node and contact the vendor."),
    (63, "ECC page retirement or row remapping recorded", "hardware", "reset GPU",
     "A retirement/remap is pending: reset the GPU when idle to apply it."),
    (64, "ECC page retirement or row remapping failed", "hardware", "drain",
     "The GPU could not retire/remap memory: reset it, and drain and RMA if it recurs."),
    (68, "Video processor (NVDEC) exception", "application or hardware", "restart app",
     "Restart the application; reset the GPU if it recurs."),
    (69, "Graphics engine class error", "application or hardware", "restart app",
     "Restart the application; reset the GPU if it recurs."),
    (74, "NVLink error", "hardware", "reset GPU",
     "Reset the GPU; check NVLink health (nvidia-smi nvlink -e); drain if the link errors persist."),
    (79, "GPU has fallen off the bus", "hardware", "reboot",
     "The GPU is unreachable: drain the node and reboot; check power, cooling and PCIe seating if it recurs."),
    (92, "High single-bit ECC error rate", "hardware", "drain",
     "Watch the corrected-error rate; plan to drain and RMA if it keeps rising."),
    (94, "Contained ECC error (the affected application was stopped)", "hardware", "restart app",
     "Restart the affected application; reset the GPU when possible to remap the row."),
    (95, "Uncontained ECC error (every application on the GPU is affected)", "hardware", "reset GPU",
     "Drain the GPU, reset it, and check remapped rows; RMA if remapping failed."),
    (109, "Context switch timeout", "application or hardware", "restart app",
     "Restart the application; reset the GPU if it recurs."),
    (119, "GSP RPC timeout (GPU system processor did not answer)", "driver", "reset GPU",
     "Reset the GPU; reboot if the reset fails; update the driver if it recurs."),
    (120, "GSP error", "driver", "reset GPU", "Reset the GPU; reboot if the reset fails."),
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
    return XidInfo(code, "Xid not in infradoctor's table", "unknown", "reset GPU",
                   "Look the code up in NVIDIA's Xid catalog; reset the GPU if work on it fails.")


def parse_xid_line(line: str, line_number: int) -> XidEvent | None:
    """One Xid event from a kernel log line, or None when the line is not an Xid line."""
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


def scan_lines(lines: Iterable[str], *, source: str, tried: Sequence[str] = ()) -> KernelLogEvidence:
    """Xid events from log lines (bounded: the newest :data:`MAX_EVENTS` are kept)."""
    events: deque[XidEvent] = deque(maxlen=MAX_EVENTS)
    total = 0
    count = 0
    for count, line in enumerate(lines, start=1):
        if "Xid" not in line:
            continue
        event = parse_xid_line(line, count)
        if event is not None:
            events.append(event)
            total += 1
    return KernelLogEvidence(
        source=source, lines_read=count, xid_events=tuple(events), xid_events_total=total, tried=tuple(tried)
    )


def _tail_lines(path: Path, limit: int = MAX_LINES) -> list[str]:
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        return list(deque(handle, maxlen=limit))


def _run(argv: Sequence[str]) -> tuple[list[str] | None, str]:
    """Output lines of a command, or None and the reason it gave nothing."""
    try:
        proc = subprocess.run(  # noqa: S603 - fixed argv
            list(argv), capture_output=True, timeout=COMMAND_TIMEOUT_S, check=False,
            env={**os.environ, "LC_ALL": "C", "SYSTEMD_PAGER": "", "PAGER": "cat"},
        )
    except FileNotFoundError:
        return None, "not installed"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"exit {proc.returncode}: {err[0] if err else 'no output'}"
    text = proc.stdout.decode("utf-8", "replace")
    lines = text.splitlines()[-MAX_LINES:]
    if not lines or (len(lines) == 1 and lines[0].startswith("-- No entries --")):
        return None, "empty"
    return lines, ""


def read_kernel_log(path: str | Path | None = None) -> KernelLogEvidence:
    """Xid events from ``path``, or from the first readable of dmesg, journalctl -k, /var/log/kern.log."""
    if path is not None:
        try:
            return scan_lines(_tail_lines(Path(path)), source=str(path))
        except (OSError, UnicodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            return KernelLogEvidence(source=None, lines_read=0, xid_events=(), tried=(f"{path}: {reason}",))
    tried: list[str] = []
    for label, argv in (
        ("dmesg", ("dmesg",)),
        ("journalctl -k", ("journalctl", "-k", "-b", "--no-pager", "-o", "short-iso", "-n", str(MAX_LINES))),
    ):
        lines, reason = _run(argv)
        if lines is None:
            tried.append(f"{label}: {reason}")
            continue
        return scan_lines(lines, source=label, tried=tried)
    for candidate in KERN_LOG_PATHS:
        log = Path(candidate)
        try:
            return scan_lines(_tail_lines(log), source=str(log), tried=tried)
        except (OSError, UnicodeError) as exc:
            tried.append(f"{candidate}: {getattr(exc, 'strerror', None) or exc}")
    return KernelLogEvidence(source=None, lines_read=0, xid_events=(), tried=tuple(tried))


def normalise_pci(address: str | None) -> str | None:
    """``00000000:3B:00.0`` and ``0000:3b:00`` both become ``0000:3b:00`` (domain:bus:device)."""
    if not address:
        return None
    match = re.search(r"(?:([0-9A-Fa-f]+):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})", address)
    if match is None:
        return address.lower()
    domain = (match.group(1) or "0")[-4:].rjust(4, "0")
    return f"{domain}:{match.group(2)}:{match.group(3)}".lower()
