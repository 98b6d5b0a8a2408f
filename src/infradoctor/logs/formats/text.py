"""Any other text: application logs and Python tracebacks (the fallback every unread line ends in).

Each line is searched for every failure signature (:func:`~infradoctor.logs.signatures.match_text_all`). Before the
search, the application's own log prefix is set aside (vLLM's ``(APIServer pid=1) ERROR 06-15 13:57:57
[file.py:420]``, klog/glog ``E0326 15:50:03.989811 12398 file.go:496]``, log4j ``2024-03-22T11:42:11,124 [WARN ]
thread logger -``, uvicorn ``INFO:``) so that tracebacks are followed whatever wraps them: their frame and
source-code lines (indented inside a traceback) are not searched, since ``raise AsyncEngineDeadError(`` is code,
not a failure; the exception line that ends a traceback is counted by type.
"""

from __future__ import annotations

import re

from infradoctor.logs.formats.base import DatedLineFormat, LineContext, LineHandler
from infradoctor.logs.formats.timestamps import best_time
from infradoctor.logs.signatures import match_text_all
from infradoctor.logs.stats import MESSAGE, NO_TIME, LogStats


def add_text_event(stats: LogStats, signatures: tuple[str, ...], subject: str, second: int, line: str,
                   klass: str = "log") -> None:
    """Timeline and events for one free-text line (one event per signature it carries)."""
    stats.add_timeline(second, klass, signatures)
    for signature in signatures:
        stats.add_event(signature, subject, second, line, channel=MESSAGE)


TRACEBACK_START = "Traceback (most recent call last):"
EXCEPTION_LINE = re.compile(r"([A-Za-z_][\w.]{0,200}(?:Error|Exception|Exceeded|Interrupt|Exit|Warning|Fault)\b|"
                            r"[A-Za-z_][\w.]{0,200}\.[A-Z]\w{0,100})(?::\s|:?$)")
APP_PREFIXES = (
    re.compile(r"\(\w{1,64} pid=\d{1,10}\) "),
    re.compile(r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})? "
               r"\[?[\w./-]{1,128}:\d{1,6}\] "),
    re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{1,9} {1,12}\d{1,10} [\w./-]{1,128}:\d{1,6}\] "),
    re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[,.]\d{3} \[[A-Z]{4,5} ?\] \S{1,200} \S{1,200} - "),
    re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL): {1,8}"),
)
"""Application log prefixes set aside before following tracebacks (anchored, bounded)."""


def message_of(payload: str) -> str:
    """The payload without the application's log prefixes (at most one of each kind, in order)."""
    text = payload
    for prefix in APP_PREFIXES:
        match = prefix.match(text)
        if match:
            text = text[match.end():]
    return text


class TextReader:
    """Follows one file's free text: tracebacks across lines, signatures per line."""

    def __init__(self, stats: LogStats, year: int) -> None:
        self.stats = stats
        self.year = year
        self.in_traceback = False
        self.last_time = NO_TIME

    def read(self, payload: str, context: LineContext, klass: str = "log") -> None:
        """Count one line: its time, the exception that ends a traceback, its signatures."""
        second = best_time(payload, self.year, context.second)
        if second == NO_TIME:
            second = self.last_time  # traceback and continuation lines belong to the last stamped line
        else:
            self.last_time = second
        message = message_of(payload)
        stripped = message.strip()
        subject = context.source
        indented = message[:1] in (" ", "\t")
        search = True
        if TRACEBACK_START in message:
            self.in_traceback = True
        elif indented and (self.in_traceback or stripped.startswith('File "')):
            self.in_traceback = True
            search = False  # a frame or its source line: code, not a failure
        elif self.in_traceback and stripped:
            self.in_traceback = False
            found = EXCEPTION_LINE.match(stripped)
            if found:
                subject = found.group(1)
                self.stats.exceptions[subject] += 1
        signatures = match_text_all(payload) if search else ()
        add_text_event(self.stats, signatures, subject, second, context.raw or payload, klass)


class TextFormat(DatedLineFormat):
    """Any text: application logs and Python tracebacks. Every line is accepted; signatures are searched in each."""

    name = "text"
    structured = False

    def sniff(self, lines: object) -> float:
        """Text fits anything; it is the fallback, so it never wins a sniff on its own."""
        return 0.0

    def handler(self, stats: LogStats, context: LineContext) -> LineHandler:
        """Follow tracebacks; attribute events to the exception type when a traceback ends in one."""
        reader = TextReader(stats, self.year)

        def handle(line: str, ctx: LineContext) -> bool:
            reader.read(line, ctx)
            return True

        return handle
