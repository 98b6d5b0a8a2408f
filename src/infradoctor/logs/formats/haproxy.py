"""HAProxy logs: ``option httplog`` and ``option tcplog`` lines, raw or behind any envelope.

``127.0.0.1:39456 [29/Nov/2026:10:00:00.123] fe be/srv1 0/0/1/12/13 200 123 - - ---- 1/1/0/0/0 0/0 "GET / HTTP/1.1"``

The line is split on whitespace (so padding, redacted clients and missing fields cost nothing) and read around its
timers field: five timers ``TR/Tw/Tc/Tr/Ta`` (httplog) or three ``Tw/Tc/Tt`` (tcplog), the backend/server before
them, then status, bytes, two cookies, the termination state, the connection counts (retries last) and the queues.
Timers are milliseconds (-1: that phase never happened). No regular expression runs on the raw line, so a line
costs time linear in its length whatever it holds.
"""

from __future__ import annotations

from infradoctor.bounded import read_int
from infradoctor.logs.formats.base import LineContext, LineHandler, LogFormat
from infradoctor.logs.formats.layout import TIME_LOCAL, parse_time
from infradoctor.logs.signatures import haproxy_signature
from infradoctor.logs.stats import NO_TIME, REQUEST, UNKNOWN, LogStats, status_class

NO_SERVER = "<NOSRV>"
MAX_TOKENS = 40
"""Tokens of a line looked at, at most (the fields HAProxy writes before the request are far fewer)."""
STATE_LETTERS = frozenset("CSPLRIDUKcs-QHTRG")


def _int(text: str) -> int | None:
    return read_int(text.lstrip("+"), low=-1, high=10**10)


def _timers(token: str, parts: int) -> list[int] | None:
    pieces = token.split("/")
    if len(pieces) != parts:
        return None
    values = [_int(p) for p in pieces]
    if any(v is None for v in values):
        return None
    return [v if v is not None else -1 for v in values]


def _counts(token: str, parts: int) -> bool:
    pieces = token.split("/")
    return len(pieces) == parts and all(p.lstrip("+").isdigit() and len(p) < 12 for p in pieces)


def _accept_second(tokens: list[str], before: int, fallback: int) -> int:
    """The accept date ``[29/Nov/2026:10:00:00.123]`` among the tokens before the timers, else ``fallback``."""
    for token in tokens[max(0, before - 6):before]:
        if token.startswith("[") and token.endswith("]") and len(token) in (22, 26) and token[3] == "/":
            second = parse_time(TIME_LOCAL, token[1:21] + " +0000")
            if second != NO_TIME:
                return second
    return fallback


class HaproxyRecord:
    """The fields one HAProxy line gives."""

    __slots__ = ("backend", "retries", "second", "server", "state", "status", "ta", "tr", "tw")

    def __init__(self) -> None:
        self.second = NO_TIME
        self.backend = "-"
        self.server = "-"
        self.tw = self.tr = self.ta = UNKNOWN
        self.status: int | None = None
        self.state = ""
        self.retries = 0


def parse_haproxy(line: str, fallback_second: int = NO_TIME) -> HaproxyRecord | None:
    """The fields of an httplog or tcplog line, or None when the line is not one."""
    tokens = line.split(None, MAX_TOKENS)[:MAX_TOKENS]
    for index in range(1, len(tokens) - 4):
        token = tokens[index]
        if token.count("/") == 4:
            timers = _timers(token, 5)
            if timers is None or index + 7 >= len(tokens):
                continue
            state = tokens[index + 5]
            if len(state) != 4 or not set(state) <= STATE_LETTERS:
                continue
            if not (_counts(tokens[index + 6], 5) and _counts(tokens[index + 7], 2)):
                continue
            record = HaproxyRecord()
            record.tw, record.tr, record.ta = (t if t >= 0 else UNKNOWN for t in (timers[1], timers[3], timers[4]))
            status = _int(tokens[index + 1])
            record.status = status if status is not None and status >= 0 else None
            record.retries = _int(tokens[index + 6].split("/")[-1]) or 0
        elif token.count("/") == 2 and index + 4 < len(tokens):
            timers = _timers(token, 3)
            if timers is None:
                continue
            state = tokens[index + 2]
            if len(state) != 2 or not set(state) <= STATE_LETTERS:
                continue
            if not (_counts(tokens[index + 3], 5) and _counts(tokens[index + 4], 2)):
                continue
            record = HaproxyRecord()
            record.tw = timers[0] if timers[0] >= 0 else UNKNOWN
            record.ta = timers[2] if timers[2] >= 0 else UNKNOWN
            record.retries = _int(tokens[index + 3].split("/")[-1]) or 0
        else:
            continue
        record.state = state[:2]
        backend, _, server = tokens[index - 1].partition("/")
        record.backend, record.server = backend[:200], (server or "-")[:200]
        record.second = _accept_second(tokens, index - 1, fallback_second)
        return record
    return None


def record_signature(record: HaproxyRecord) -> tuple[str | None, str]:
    """(signature or None, subject): the subject is ``backend/server``, or the backend when it had no server."""
    signature = haproxy_signature(record.state, record.server, record.status)
    subject = record.backend if record.server in (NO_SERVER, "-") else f"{record.backend}/{record.server}"
    return signature, subject


def add_record(stats: LogStats, record: HaproxyRecord, line: str) -> None:
    """Everything one HAProxy request contributes to the stats."""
    served = record.server not in (NO_SERVER, "-") and record.tr != UNKNOWN
    stats.requests += 1
    stats.request_hist[(UNKNOWN if record.status is None else record.status, record.ta, served)] += 1
    stats.haproxy_states[record.state] += 1
    if record.server != NO_SERVER and record.server != "-":
        stats.attempt_hist[(f"{record.backend}/{record.server}",
                            UNKNOWN if record.status is None else record.status, record.tr)] += 1
        stats.attempts_hist[1 + record.retries] += 1
        if record.ta != UNKNOWN and record.tr != UNKNOWN:
            stats.overhead_hist[max(0, record.ta - record.tr)] += 1
    else:
        stats.attempts_hist[0] += 1
    stats.add_queue(record.second, record.tw)
    signature, subject = record_signature(record)
    stats.add_timeline(record.second, status_class(record.status), signature)
    if signature is not None:
        stats.add_event(signature, subject, record.second, line, record.ta, channel=REQUEST)


class HaproxyFormat(LogFormat):
    """HAProxy httplog and tcplog."""

    name = "haproxy"
    needs = "/"

    def handler(self, stats: LogStats, context: LineContext) -> LineHandler:
        """Read each line around its timers field; count its request, queue time and termination state."""

        def handle(line: str, ctx: LineContext) -> bool:
            if "/" not in line:
                return False
            record = parse_haproxy(line, ctx.second)
            if record is None:
                return False
            add_record(stats, record, ctx.raw or line)
            return True

        return handle
