"""HAProxy ``option httplog`` lines (raw or behind a syslog header).

``127.0.0.1:39456 [29/Nov/2026:10:00:00.123] fe be/srv1 0/0/1/12/13 200 123 - - ---- 1/1/0/0/0 0/0 "GET / HTTP/1.1"``

Timers TR/Tw/Tc/Tr/Ta are milliseconds (-1: that phase never happened, where the request died); the four-letter
termination state starts with who ended the session and at which phase; ``%rc`` counts retries.
"""

from __future__ import annotations

import re

from infradoctor.logs.formats.base import LineFormat, LineHandler
from infradoctor.logs.formats.layout import TIME_LOCAL, parse_time
from infradoctor.logs.signatures import haproxy_signature
from infradoctor.logs.stats import UNKNOWN, LogStats

HTTPLOG_RE = re.compile(
    r"(?P<client>\S+):(?P<cport>\d+) \[(?P<time>\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d)(?:\.\d+)?\] "
    r"(?P<frontend>\S+) (?P<backend>[^/ ]+)/(?P<server>\S+) "
    r"(?P<TR>-?\d+)/(?P<Tw>-?\d+)/(?P<Tc>-?\d+)/(?P<Tr>-?\d+)/\+?(?P<Ta>-?\d+) "
    r"(?P<status>-?\d+) \+?(?P<bytes>\d+) \S+ \S+ (?P<term>\S{4}) "
    r"(?P<actconn>\d+)/(?P<feconn>\d+)/(?P<beconn>\d+)/(?P<srvconn>\d+)/\+?(?P<retries>\d+) "
    r"(?P<srvqueue>\d+)/(?P<backendqueue>\d+)"
)
"""The fixed part of an httplog line (searched, so syslog prefixes are fine)."""


def _timer(text: str) -> int:
    value = int(text)
    return value if value >= 0 else UNKNOWN


class HaproxyFormat(LineFormat):
    """HAProxy httplog."""

    name = "haproxy"

    def handler(self, stats: LogStats, source_name: str) -> LineHandler:
        """Parse timers, termination state, server and retries."""
        search = HTTPLOG_RE.search

        def handle(line: str) -> bool:
            found = search(line)
            if found is None:
                return False
            get = found.group
            second = parse_time(TIME_LOCAL, get("time") + " +0000")
            status_value = int(get("status"))
            status = status_value if status_value >= 0 else None
            server = get("server")
            request_ms = _timer(get("Ta"))
            upstream_ms = _timer(get("Tr"))
            upstreams: list[tuple[str, int, int]] = []
            if server != "<NOSRV>":
                upstreams = [(f"{get('backend')}/{server}", UNKNOWN if status is None else status, upstream_ms)]
            retries = int(get("retries"))
            signature = haproxy_signature(get("term")[:2], server, status)
            stats.add_request(second, status, request_ms, upstreams, signature, line,
                              attempts=(1 + retries) if upstreams else 0, subject=get("backend"))
            stats.add_queue(second, _timer(get("Tw")))
            return True

        return handle
