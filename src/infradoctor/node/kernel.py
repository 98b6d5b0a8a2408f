"""GPU events from the kernel log: ``NVRM: Xid`` lines, read with :class:`infradoctor.xid.KernelLineReader`.

The reader is the one ``infradoctor logs`` uses, so a line gives the same event in both: Xid lines wherever they sit
in the line (bare, behind any prefix), and "GPU has fallen off the bus" without an Xid (as Xid 79).

Sources, first readable wins: ``dmesg``, ``journalctl -k`` (this boot), ``/var/log/kern.log``; or a file the user
names. Unreadable sources are "not available" with the reason, never an exception. Reading is bounded (the last
:data:`MAX_LINES` lines; at most :data:`MAX_EVENTS` events kept).

A line looks like ``[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen
off the bus.``
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path

from infradoctor.node.evidence import KernelLogEvidence
from infradoctor.procs import run_capture
from infradoctor.xid import XID_CATALOG, KernelLineReader, XidEvent, XidInfo, normalise_pci, parse_xid_line, xid_info

__all__ = [
    "XID_CATALOG", "XidEvent", "XidInfo", "normalise_pci", "parse_xid_line", "read_kernel_log", "scan_lines",
    "xid_info",
]

MAX_LINES = 200_000
"""Lines read from the end of a log."""
MAX_EVENTS = 1000
"""Xid events kept (oldest dropped first); all are counted."""
COMMAND_TIMEOUT_S = 5.0
"""Longest wait for ``dmesg`` / ``journalctl``."""
KERN_LOG_PATHS = ("/var/log/kern.log", "/var/log/messages")
"""Log files tried after the commands."""


def scan_lines(lines: Iterable[str], *, source: str, tried: Sequence[str] = ()) -> KernelLogEvidence:
    """Xid events from log lines (bounded: the newest :data:`MAX_EVENTS` are kept)."""
    events: deque[XidEvent] = deque(maxlen=MAX_EVENTS)
    reader = KernelLineReader()
    total = 0
    count = 0
    for count, line in enumerate(lines, start=1):
        event = reader.feed(line, count)
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
    proc = run_capture(argv, timeout=COMMAND_TIMEOUT_S,
                       env={**os.environ, "LC_ALL": "C", "SYSTEMD_PAGER": "", "PAGER": "cat"})
    if not proc.ok:
        return None, proc.reason()
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
