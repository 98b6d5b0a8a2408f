"""Envoy and Istio text access logs in any of the common layouts, read by their shape instead of a format string.

Envoy's default format, Istio's (1.5-1.8 and later), and the many variants people write around them share one
shape: an optional ``[%START_TIME%]``, the quoted request, ``%RESPONSE_CODE% %RESPONSE_FLAGS%`` and then, after
optional extra fields (``%RESPONSE_CODE_DETAILS%``, ``%CONNECTION_TERMINATION_DETAILS%``, a quoted
``%UPSTREAM_TRANSPORT_FAILURE_REASON%``), the run ``%BYTES_RECEIVED% %BYTES_SENT% %DURATION%
%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%`` followed by the quoted ``X-FORWARDED-FOR``, ``USER-AGENT``, ``X-REQUEST-ID``,
``:AUTHORITY`` and ``%UPSTREAM_HOST%`` (Istio then adds the cluster and addresses). The line is split on ``"``
once (linear), the numeric run is found in the first unquoted columns, and the fields are read by their position
from it. A line without ``[START_TIME]`` takes its envelope's time.
"""

from __future__ import annotations

from infradoctor.logs.formats.access import RequestDecoder
from infradoctor.logs.formats.base import LineContext, LineHandler, LogFormat
from infradoctor.logs.formats.layout import (
    ENVOY_DEFAULT,
    ROLE_FLAGS,
    ROLE_REQUEST_TIME,
    ROLE_STATUS,
    ROLE_TIME,
    ROLE_UPSTREAM,
    ROLE_UPSTREAM_TIME,
    compile_envoy,
)
from infradoctor.logs.stats import LogStats

MAX_COLUMNS = 40
"""A line is split on ``"`` into at most this many columns."""
NUMERIC_SEARCH = 8
"""Unquoted columns after the request searched for the bytes/duration run."""
FLAG_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz,")


def _number(token: str) -> bool:
    return token.isdigit() and len(token) <= 15


def _request(text: str) -> bool:
    """``METHOD PATH PROTOCOL`` (or ``-`` for TCP proxies)."""
    if text == "-":
        return True
    method = text.split(" ", 1)[0]
    return 0 < len(method) <= 16 and method.isalpha() and method.isupper() and " " in text


def _flags(token: str) -> bool:
    return token == "-" or (0 < len(token) <= 160 and set(token) <= FLAG_CHARS)


class EnvoyRecord:
    """The fields of one Envoy text access line."""

    __slots__ = ("cluster", "details", "duration", "flags", "status", "time", "upstream", "upstream_time")

    def __init__(self) -> None:
        self.time: str | None = None
        self.status = "-"
        self.flags = "-"
        self.details: str | None = None
        self.duration: str | None = None
        self.upstream_time: str | None = None
        self.upstream: str | None = None
        self.cluster: str | None = None


def parse_envoy_text(line: str) -> EnvoyRecord | None:
    """The fields of an Envoy/Istio text access line, or None when the line does not have the shape."""
    if '"' not in line:
        return None
    columns = line.split('"', MAX_COLUMNS)
    if len(columns) < 3:
        return None
    head = columns[0].strip()
    record = EnvoyRecord()
    if head:
        if not (head.startswith("[") and head.endswith("]") and len(head) <= 40):
            return None
        record.time = head[1:-1]
    if not _request(columns[1]):
        return None
    first = columns[2].split()
    if len(first) < 2 or not (first[0].isdigit() and len(first[0]) <= 3) or not _flags(first[1]):
        return None
    record.status, record.flags = first[0], first[1]
    if len(first) > 2 and not first[2].isdigit():
        record.details = first[2][:200]
    for index in range(2, min(len(columns), 2 + 2 * NUMERIC_SEARCH), 2):
        tokens = columns[index].split()
        if len(tokens) >= 4 and all(_number(t) for t in tokens[-4:-1]) and (
                _number(tokens[-1]) or tokens[-1] == "-"):
            if index == 2 and len(tokens) < 6:
                continue  # the code and flags must come before the run
            record.duration = tokens[-2]
            record.upstream_time = None if tokens[-1] == "-" else tokens[-1]
            if len(columns) > index + 9:
                upstream = columns[index + 9]
                record.upstream = upstream if upstream and " " not in upstream else None
            if len(columns) > index + 10:
                tail = columns[index + 10].split(None, 1)
                record.cluster = tail[0][:200] if tail and tail[0] != "-" else None
            return record
    return None


class EnvoyTextFormat(LogFormat):
    """Envoy/Istio text access lines read by their shape (see the module docstring)."""

    name = "envoy"
    needs = '"'

    def handler(self, stats: LogStats, context: LineContext) -> LineHandler:
        """Decode each line with the Envoy request decoder; the envelope's time when the line has none."""
        decoder = RequestDecoder(compile_envoy(ENVOY_DEFAULT))

        def handle(line: str, ctx: LineContext) -> bool:
            record = parse_envoy_text(line)
            if record is None:
                return False
            fields = {ROLE_TIME: record.time, ROLE_STATUS: record.status, ROLE_FLAGS: record.flags,
                      ROLE_REQUEST_TIME: record.duration, ROLE_UPSTREAM_TIME: record.upstream_time,
                      ROLE_UPSTREAM: record.upstream}
            decoder.add_line(stats, fields.get, ctx.raw or line, ctx.second)
            return True

        return handle
