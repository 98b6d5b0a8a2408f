"""Any other text: application logs and Python tracebacks (the fallback format).

Each line is matched against the signature catalog; its timestamp is read where the line has one. Python tracebacks
are followed across lines so the exception type that ended each one is counted.
"""

from __future__ import annotations

import re

from infradoctor.logs.formats.base import DatedLineFormat, LineHandler
from infradoctor.logs.formats.timestamps import line_time
from infradoctor.logs.signatures import match_text
from infradoctor.logs.stats import NO_TIME, LogStats


def add_text_event(stats: LogStats, signature: str | None, subject: str, second: int, line: str) -> None:
    """Timeline and event for one free-text line."""
    stats.add_timeline(second, "log", signature)
    if signature is not None:
        stats.add_event(signature, subject, second, line)


TRACEBACK_START = "Traceback (most recent call last):"
EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exceeded|Interrupt|Exit|Warning|Fault)\b|"
                             r"[A-Za-z_][\w.]*\.[A-Z]\w*)(?::\s|$)")


class TextFormat(DatedLineFormat):
    """Any text: application logs and Python tracebacks. Every line is accepted; signatures are searched in each."""

    name = "text"

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
            if TRACEBACK_START in line:
                state["in_traceback"] = True
            elif state["in_traceback"] and line[:1] not in (" ", "\t") and stripped:
                state["in_traceback"] = False
                found = EXCEPTION_LINE.match(stripped)
                if found:
                    subject = found.group(1)
                    stats.exceptions[subject] += 1
            add_text_event(stats, match_text(line), subject, second, line)
            return True

        return handle
