"""Timestamps of free-text log lines: ISO 8601, nginx error log, ``dmesg -T`` and syslog."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from functools import lru_cache

from infradoctor.logs.stats import NO_TIME

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
