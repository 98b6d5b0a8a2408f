"""Free-text logs: nginx error log, kernel log (``NVRM: Xid``), and any other text (app logs, Python tracebacks).

Each line is matched against the signature catalog; its timestamp is read where the line has one. Python tracebacks
are followed across lines so the exception type that ended each one is counted.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from functools import lru_cache

from infradoctor.logs.formats.base import LineFormat, LineHandler
from infradoctor.logs.signatures import XID_RE, match_text
from infradoctor.logs.stats import NO_TIME, LogStats

_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,]\d+)?(Z|[+-]\d\d:?\d\d)?")
_NGINX_TIME = re.compile(r"^(\d{4})/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)")
_SYSLOG = re.compile(
    r"^(?:<\d+>\d?\s*)?(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d\d?) (\d\d):(\d\d):(\d\d)"
)
_DMESG_T = re.compile(r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) +(\d\d?) (\d\d):(\d\d):(\d\d) (\d{4})\]")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                        "Dec"), start=1)}


@lru_cache(maxsize=8192)
def _epoch(year: int, month: int, day: int, hour: int, minute: int, second: int, offset: str | None) -> int:
    try:
        base = int(datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc).timestamp())
    except ValueError:
        return NO_TIME
    if offset and offset != "Z":
        digits = offset.replace(":", "")
        shift = int(digits[1:3]) * 3600 + int(digits[3:5]) * 60
        base -= shift if digits[0] == "+" else -shift
    return base


def line_time(line: str, year: int) -> int:
    """Epoch second of a line's timestamp (ISO 8601, nginx error log, ``dmesg -T``, syslog), NO_TIME when none.

    Times without a zone are taken as UTC; syslog lines have no year, ``year`` is used.
    """
    head = line[:64]
    match = _NGINX_TIME.match(head)
    if match:
        return _epoch(*(int(g) for g in match.groups()), None)
    match = _ISO.search(head)
    if match:
        *parts, offset = match.groups()
        return _epoch(*(int(g) for g in parts), offset)
    match = _DMESG_T.match(head)
    if match and match.group(1) in _MONTHS:
        month, day, hour, minute, second, year_text = match.groups()
        return _epoch(int(year_text), _MONTHS[month], int(day), int(hour), int(minute), int(second), None)
    match = _SYSLOG.match(head)
    if match:
        month, day, hour, minute, second = match.groups()
        return _epoch(year, _MONTHS[month], int(day), int(hour), int(minute), int(second), None)
    return NO_TIME


_UPSTREAM_FIELD = re.compile(r'upstream: "(?:[a-z0-9]+://)?([^/"]+)')


def add_text_event(stats: LogStats, signature: str | None, subject: str, second: int, line: str) -> None:
    """Timeline and event for one free-text line."""
    stats.add_timeline(second, "log", signature)
    if signature is not None:
        stats.add_event(signature, subject, second, line)


class NginxErrorFormat(LineFormat):
    """nginx's error log: ``2026/11/29 10:00:00 [error] 12#12: *5 connect() failed (111: ...) ..., upstream: "..."``."""

    name = "nginx-error"
    _LINE = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[(?:debug|info|notice|warn|error|crit|alert|emerg)\] ")

    def __init__(self, year: int = 1970) -> None:
        self.year = year

    def handler(self, stats: LogStats, source_name: str) -> LineHandler:
        """Match lines, take the upstream from ``upstream: "..."`` as the subject."""
        line_re = self._LINE

        def handle(line: str) -> bool:
            if not line_re.match(line):
                return False
            signature = match_text(line)
            subject = "-"
            if signature is not None:
                found = _UPSTREAM_FIELD.search(line)
                subject = found.group(1) if found else "-"
            add_text_event(stats, signature, subject, line_time(line, self.year), line)
            return True

        return handle


class KernelFormat(LineFormat):
    """Kernel log lines: ``dmesg`` (``[ 1234.5678] NVRM: Xid ...``), ``dmesg -T``, syslog/journal ``kernel:`` lines."""

    name = "kernel"
    _LINE = re.compile(r"^\[\s*\d+\.\d+\] |\bkernel: |^<\d>\[|^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} ")

    def __init__(self, year: int = 1970) -> None:
        self.year = year

    def handler(self, stats: LogStats, source_name: str) -> LineHandler:
        """Match kernel lines; Xid lines count per (code, device) and become events per code."""
        line_re = self._LINE

        def handle(line: str) -> bool:
            if not line_re.search(line):
                return False
            signature = match_text(line)
            subject = source_name
            if signature == "gpu_xid":
                xid = XID_RE.search(line)
                if xid:
                    code, device = int(xid.group("code")), xid.group("device")
                    stats.xids[(code, device)] += 1
                    subject = f"Xid {code} ({device})"
            add_text_event(stats, signature, subject, line_time(line, self.year), line)
            return True

        return handle


_TRACEBACK_START = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exceeded|Interrupt|Exit|Warning|Fault)\b|"
                             r"[A-Za-z_][\w.]*\.[A-Z]\w*)(?::\s|$)")


class TextFormat(LineFormat):
    """Any text: application logs and Python tracebacks. Every line is accepted; signatures are searched in each."""

    name = "text"

    def __init__(self, year: int = 1970) -> None:
        self.year = year

    def sniff(self, lines: list[str]) -> float:  # type: ignore[override]
        """Text fits anything; it is the fallback, so it never wins a sniff on its own."""
        return 0.0

    def handler(self, stats: LogStats, source_name: str) -> LineHandler:
        """Follow tracebacks; attribute events to the exception type when a traceback ends in one."""
        state = {"in_traceback": False, "last_time": NO_TIME}

        def handle(line: str) -> bool:
            second = line_time(line, self.year)
            if second == NO_TIME:
                second = state["last_time"]  # traceback and continuation lines belong to the last stamped line
            else:
                state["last_time"] = second
            subject = source_name
            stripped = line.strip()
            if _TRACEBACK_START in line:
                state["in_traceback"] = True
            elif state["in_traceback"] and line[:1] not in (" ", "\t") and stripped:
                state["in_traceback"] = False
                found = _EXCEPTION_LINE.match(stripped)
                if found:
                    subject = found.group(1)
                    stats.exceptions[subject] += 1
            add_text_event(stats, match_text(line), subject, second, line)
            return True

        return handle
