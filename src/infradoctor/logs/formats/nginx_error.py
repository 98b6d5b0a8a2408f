"""nginx's error log: connect() failures, upstream timeouts and resets, "no live upstreams", with the upstream."""

from __future__ import annotations

import re

from infradoctor.logs.formats.base import DatedLineFormat, LineContext, LineHandler
from infradoctor.logs.formats.text import add_text_event
from infradoctor.logs.formats.timestamps import best_time
from infradoctor.logs.signatures import match_text_all
from infradoctor.logs.stats import LogStats

_UPSTREAM_FIELD = re.compile(r'upstream: "(?:[a-z0-9]{1,16}://)?([^/"]{1,300})')


class NginxErrorFormat(DatedLineFormat):
    """nginx's error log: ``2026/11/29 10:00:00 [error] 12#12: *5 connect() failed (111: ...) ..., upstream: "..."``.

    The subject of a failure is the host of ``upstream: "..."``: a backend address, or the upstream group's name
    for "no live upstreams" (nginx found no server in the group to try).
    """

    name = "nginx-error"
    needs = "/"
    _LINE = re.compile(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[(?:debug|info|notice|warn|error|crit|alert|emerg)\] ")

    def handler(self, stats: LogStats, context: LineContext) -> LineHandler:
        """Match lines, take the upstream from ``upstream: "..."`` as the subject."""
        line_re = self._LINE
        year = self.year

        def handle(line: str, ctx: LineContext) -> bool:
            if not line_re.match(line):
                return False
            signatures = match_text_all(line)
            subject = "-"
            if signatures:
                found = _UPSTREAM_FIELD.search(line)
                subject = found.group(1) if found else "-"
            add_text_event(stats, signatures, subject, best_time(line, year, ctx.second), ctx.raw or line)
            return True

        return handle
