"""HAProxy ``option httplog`` lines (raw or behind a syslog header).

``127.0.0.1:39456 [29/Nov/2026:10:00:00.123] fe be/srv1 0/0/1/12/13 200 123 - - ---- 1/1/0/0/0 0/0 "GET / HTTP/1.1"``

Timers TR/Tw/Tc/Tr/Ta are milliseconds (-1: that phase never happened, where the request died); the four-letter
termination state starts with who ended the session and at which phase; ``%rc`` counts retries. Like the access-log
engines, lines are counted as tuples of raw fields and each distinct tuple is decoded once at the end of the file.
"""

from __future__ import annotations

import re
from collections import Counter

from infradoctor.logs.formats.base import LineFormat, LineHandler
from infradoctor.logs.formats.layout import TIME_LOCAL, parse_time
from infradoctor.logs.signatures import haproxy_signature
from infradoctor.logs.stats import UNKNOWN, LogStats, status_class

HTTPLOG_RE = re.compile(
    r"(?P<client>\S+):(?P<cport>\d+) \[(?P<time>\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d)(?:\.\d+)?\] "
    r"(?P<frontend>\S+) (?P<backend>[^/ ]+)/(?P<server>\S+) "
    r"(?P<TR>-?\d+)/(?P<Tw>-?\d+)/(?P<Tc>-?\d+)/(?P<Tr>-?\d+)/\+?(?P<Ta>-?\d+) "
    r"(?P<status>-?\d+) \+?(?P<bytes>\d+) \S+ \S+ (?P<term>\S{4}) "
    r"(?P<actconn>\d+)/(?P<feconn>\d+)/(?P<beconn>\d+)/(?P<srvconn>\d+)/\+?(?P<retries>\d+) "
    r"(?P<srvqueue>\d+)/(?P<backendqueue>\d+)"
)
"""The fixed part of an httplog line (searched, so syslog prefixes are fine)."""
NO_SERVER = "<NOSRV>"
_FIELDS = ("time", "backend", "server", "Tw", "Tr", "Ta", "status", "term", "retries")


def _timer(text: str) -> int:
    value = int(text)
    return value if value >= 0 else UNKNOWN


def _status(text: str) -> int | None:
    value = int(text)
    return value if value >= 0 else None


def _second(time_raw: str) -> int:
    return parse_time(TIME_LOCAL, time_raw + " +0000")


def _may_fail(server: str, term: str) -> bool:
    """Superset of "has a signature" (see :func:`haproxy_signature`)."""
    return server == NO_SERVER or term[:1] in ("s", "S", "c", "C")


class HaproxyFormat(LineFormat):
    """HAProxy httplog."""

    name = "haproxy"

    def __init__(self) -> None:
        self._groups: dict[str, Counter[tuple[str | None, ...]]] = {}

    def handler(self, stats: LogStats, source_name: str) -> LineHandler:
        """Count raw tuples of timers, status, server and termination state; keep failing lines as examples."""
        search = HTTPLOG_RE.search
        groups = self._groups = {name: Counter() for name in ("requests", "upstreams", "outcomes", "durations",
                                                              "queue")}
        requests, upstreams, outcomes = groups["requests"], groups["upstreams"], groups["outcomes"]
        durations, queue, overhead_hist = groups["durations"], groups["queue"], stats.overhead_hist

        def handle(line: str) -> bool:
            found = search(line)
            if found is None:
                return False
            time_raw, backend, server, tw, tr, ta, status, term, retries = found.group(*_FIELDS)
            requests[(status, ta)] += 1
            upstreams[(status, backend, server, tr, retries)] += 1
            if server != NO_SERVER and ta[0] != "-" and tr[0] != "-":
                overhead_hist[max(0, int(ta) - int(tr))] += 1
            queue[(time_raw[:18] + "00", tw)] += 1
            if _may_fail(server, term):
                outcomes[(time_raw, status, backend, server, term)] += 1
                durations[(status, backend, server, term, ta)] += 1
                signature, subject = _signature(status, backend, server, term)
                if signature is not None:
                    stats.add_example(signature, subject, line)
            else:
                outcomes[(time_raw[:18] + "00", status, None, None, None)] += 1
            return True

        return handle

    def finish(self, stats: LogStats) -> None:
        """Decode each distinct tuple once."""
        groups, self._groups = self._groups, {}
        for (status_raw, ta), count in groups["requests"].items():
            status = _status(status_raw or "-1")
            stats.requests += count
            stats.request_hist[(UNKNOWN if status is None else status, _timer(ta or "-1"))] += count
        for (status_raw, backend, server, tr, retries), count in groups["upstreams"].items():
            if server == NO_SERVER:
                stats.attempts_hist[0] += count
                continue
            status = _status(status_raw or "-1")
            stats.attempt_hist[(f"{backend}/{server}", UNKNOWN if status is None else status, _timer(tr or "-1"))] \
                += count
            stats.attempts_hist[1 + int(retries or 0)] += count
        for (minute_raw, tw), count in groups["queue"].items():
            stats.add_queue(_second(minute_raw or ""), _timer(tw or "-1"), count)
        for (time_raw, status_raw, backend, server, term), count in groups["outcomes"].items():
            second = _second(time_raw or "")
            signature, subject = _signature(status_raw, backend, server, term)
            stats.add_timeline(second, status_class(_status(status_raw or "-1")), signature, count)
            if signature is not None:
                stats.count_event(signature, subject, second, count)
        for (status_raw, backend, server, term, ta), count in groups["durations"].items():
            signature, _ = _signature(status_raw, backend, server, term)
            duration = _timer(ta or "-1")
            if signature is not None and duration != UNKNOWN:
                stats.sig_durations[(signature, duration)] += count


def _signature(
    status_raw: str | None, backend: str | None, server: str | None, term: str | None
) -> tuple[str | None, str]:
    """(signature, subject): the subject is ``backend/server``, or the backend when it had no server."""
    if backend is None or server is None or term is None:
        return None, "-"
    signature = haproxy_signature(term[:2], server, _status(status_raw or "-1"))
    return signature, backend if server == NO_SERVER else f"{backend}/{server}"
