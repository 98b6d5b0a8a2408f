"""nginx's error log: connect() failures, upstream timeouts and resets, "no live upstreams", with the upstream."""

from __future__ import annotations

import re

from infradoctor.logs.formats.base import DatedLineFormat, LineHandler
from infradoctor.logs.formats.text import add_text_event
from infradoctor.logs.formats.timestamps import line_time
from infradoctor.logs.signatures import match_text
from infradoctor.logs.stats import LogStats

_UPSTREAM_FIELD = re.compile(r'upstream: "(?:[a-z0-9]+://)?([^/"]+)')


class NginxErrorFormat(DatedLineFormat):
    """nginx's error log: ``2026/11/29 10:00:00 [error] 12#12: *5 connect() failed (111: ...) ..., upstream: "..."``."""

    name = "nginx-error"
    _LINE = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[(?:debug|info|notice|warn|error|crit|alert|emerg)\] ")

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
