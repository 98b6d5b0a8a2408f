"""Timestamps of log lines: ISO 8601 / RFC 3339, nginx error log, ``dmesg -T``, syslog, klog and vLLM prefixes.

Every parser here is anchored or literal-led with bounded repeats (linear in the line) and gives an epoch second
within :data:`~infradoctor.logs.stats.MAX_EPOCH`, or ``NO_TIME``: a year 9999 or a 20-digit epoch is not a time.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from functools import lru_cache

from infradoctor.logs.stats import MAX_EPOCH, NO_TIME

_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,]\d{1,9})?(Z|[+-]\d\d:?\d\d)?")
_NGINX_TIME = re.compile(r"(\d{4})/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)")
_SYSLOG = re.compile(
    r"(?:<\d{1,3}>\d?\s?)?(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) {1,2}(\d\d?) (\d\d):(\d\d):(\d\d)"
)
_DMESG_T = re.compile(r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) {1,2}(\d\d?) (\d\d):(\d\d):(\d\d) (\d{4})\]")
_MONTH_DAY = re.compile(r"(?:[IWEF](\d\d)(\d\d) |(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (\d\d)-(\d\d) )"
                        r"(\d\d):(\d\d):(\d\d)")
MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                       "Dec"), start=1)}
HEAD_CHARS = 64
"""Characters at the start of a line searched for its timestamp."""


@lru_cache(maxsize=8192)
def epoch(year: int, month: int, day: int, hour: int, minute: int, second: int, offset: str | None) -> int:
    """Epoch second of a civil time (``offset`` like ``Z``, ``+01:00``, ``-0500`` or None for UTC).

    NO_TIME when it is not a valid time or not within 1970..:data:`MAX_EPOCH`.
    """
    try:
        base = int(datetime(year, month, day, hour, minute, second, tzinfo=timezone.utc).timestamp())
    except (ValueError, OverflowError):
        return NO_TIME
    if offset and offset != "Z":
        digits = offset.replace(":", "")
        if len(digits) != 5 or not digits[1:].isdigit():
            return NO_TIME
        shift = int(digits[1:3]) * 3600 + int(digits[3:5]) * 60
        base -= shift if digits[0] == "+" else -shift
    return base if 0 <= base <= MAX_EPOCH else NO_TIME


def iso_time(text: str) -> int:
    """Epoch second of an ISO 8601 / RFC 3339 time at the start of ``text`` (fraction and zone optional)."""
    match = _ISO.match(text[:HEAD_CHARS])
    if match is None:
        return NO_TIME
    *parts, offset = match.groups()
    return epoch(*(int(g) for g in parts), offset)


def epoch_number(value: float | int) -> int:
    """An epoch second from a number: seconds, or milliseconds when too large for seconds; NO_TIME otherwise."""
    if value != value or value < 0:
        return NO_TIME
    if value > MAX_EPOCH:
        value = value / 1000  # epoch milliseconds
    return int(value) if 0 <= value <= MAX_EPOCH else NO_TIME


def line_time(line: str, year: int) -> int:
    """Epoch second of a line's timestamp, NO_TIME when none (see :func:`dated_line_time`)."""
    return dated_line_time(line, year)[0]


def dated_line_time(line: str, year: int) -> tuple[int, bool]:
    """(epoch second of a line's timestamp or NO_TIME, whether the line gave its year).

    Reads ISO 8601 anywhere in the first :data:`HEAD_CHARS` characters, nginx error log, ``dmesg -T`` and syslog
    times at the start, and klog (``E0326 15:50:03``) / vLLM (``ERROR 06-13 02:36:52``) month-day times; times
    without a zone are UTC; times without a year take ``year``.
    """
    head = line[:HEAD_CHARS]
    if not head:
        return NO_TIME, False
    first = head[0]
    if head[4:5] == "/":
        match = _NGINX_TIME.match(head)
        if match:
            return epoch(*(int(g) for g in match.groups()), None), True
    if "-" in head:
        match = _ISO.search(head)
        if match:
            *parts, offset = match.groups()
            return epoch(*(int(g) for g in parts), offset), True
    if first == "[":
        match = _DMESG_T.match(head)
        if match and match.group(1) in MONTHS:
            month, day, hour, minute, second, year_text = match.groups()
            return epoch(int(year_text), MONTHS[month], int(day), int(hour), int(minute), int(second), None), True
        return NO_TIME, False
    if first == "<" or head[:3] in MONTHS:
        match = _SYSLOG.match(head)
        if match:
            month, day, hour, minute, second = match.groups()
            return epoch(year, MONTHS[month], int(day), int(hour), int(minute), int(second), None), False
    match = _MONTH_DAY.match(head) if first.isupper() else None
    if match:
        m1, d1, m2, d2, hour, minute, second = match.groups()
        return epoch(year, int(m1 or m2), int(d1 or d2), int(hour), int(minute), int(second), None), False
    return NO_TIME, False


def best_time(line: str, year: int, envelope_second: int) -> int:
    """The line's own time when it gives its year, else the envelope's time, else the line's time in ``year``."""
    second, dated = dated_line_time(line, year)
    if envelope_second != NO_TIME and (second == NO_TIME or not dated):
        return envelope_second
    return second


def syslog_time(month: str, day: str, clock: str, year: int) -> int:
    """Epoch second of an RFC 3164 time (``Dec`` ``2`` ``11:38:27``) in ``year``."""
    if month not in MONTHS or len(clock) != 8:
        return NO_TIME
    try:
        return epoch(year, MONTHS[month], int(day), int(clock[0:2]), int(clock[3:5]), int(clock[6:8]), None)
    except ValueError:
        return NO_TIME
