"""The interface every log format implements: sniff a sample, read one line at a time into :class:`LogStats`.

A format's handler reads one line *payload* (the line without its envelope, see :mod:`infradoctor.logs.envelope`)
with a :class:`LineContext` that says what the envelope knew (time, source) and returns False when the line is not
in its format. :mod:`infradoctor.logs.formats.router` feeds each line of a file to the formats in turn, so a mixed
file's lines each go to the format that reads them.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infradoctor.logs.source import LogSource
from infradoctor.logs.stats import NO_TIME, LogStats


class LineContext:
    """What the router knows about the line being read (one object per file, updated per line)."""

    __slots__ = ("file", "program", "raw", "second", "source")

    def __init__(self, file: str) -> None:
        self.file = file
        """The file's display name."""
        self.second = NO_TIME
        """The envelope's time (epoch second), NO_TIME when it had none: used when the payload has no time."""
        self.source = file
        """The envelope's source (``pod/container``, service, program), else the file: the subject of free-text
        failures."""
        self.program = ""
        """The syslog/journald program tag (``kernel``), ``""`` when none."""
        self.raw = ""
        """The whole line as it is in the file (kept as the example of a failure)."""


LineHandler = Callable[[str, LineContext], bool]
"""Reads one line payload into the stats; False when the line is not in the format."""


@dataclass(frozen=True)
class ParseOptions:
    """Options that reach the parsers."""

    engine: str = "auto"
    """``auto`` (polars for large access logs when installed), ``polars`` or ``python``."""
    polars_min_bytes: int = 8 * 1024 * 1024
    """With ``auto``, files smaller than this use the Python engine (polars' import costs ~0.5 s)."""


class LogFormat(abc.ABC):
    """One log format."""

    name: str = ""
    """Name used by ``--format`` and in results."""
    structured: bool = True
    """False only for the free-text fallback (its lines are searched, not decoded)."""
    needs: str = ""
    """A character every line of the format contains (the router skips the format for lines without it)."""

    @abc.abstractmethod
    def handler(self, stats: LogStats, context: LineContext) -> LineHandler:
        """A fresh per-file line handler."""

    def finish(self, stats: LogStats) -> None:  # noqa: B027 - most formats count as they read: nothing to flush
        """Called after the last line of a file (flush grouped counts and multi-line state)."""

    def parse(self, source: LogSource, stats: LogStats, options: ParseOptions) -> None:
        """Read a whole file with this format first and every other format as a fallback (as ``--format auto``)."""
        from infradoctor.logs.formats.router import FileChoice, candidates, parse_source

        year = getattr(self, "year", 1970)
        fallbacks = tuple(f for f in candidates(year=year) if type(f) is not type(self) or f.name != self.name)
        parse_source(source, FileChoice(self, 1.0, fallbacks, year=year), stats, options)

    def sniff(self, lines: Sequence[str]) -> float:
        """Share (0-1) of sample payloads the handler accepts, parsed into a throw-away LogStats."""
        if not lines:
            return 0.0
        context = LineContext("sniff")
        stats = LogStats()
        handle = self.handler(stats, context)
        accepted = sum(1 for line in lines if handle(line, context))
        self.finish(stats)
        return accepted / len(lines)


class DatedLineFormat(LogFormat):
    """A format whose timestamps may lack a year (syslog, ``Nov 29 10:00:00``): ``year`` fills it in."""

    def __init__(self, year: int = 1970) -> None:
        self.year = year
