"""The interface every log format implements: sniff a sample, parse a whole file into :class:`LogStats`."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infradoctor.logs.source import SKIP_MISMATCH, LogSource, iter_lines
from infradoctor.logs.stats import LogStats

LineHandler = Callable[[str], bool]
"""Parses one line into the stats; False when the line does not fit the format."""


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

    @abc.abstractmethod
    def sniff(self, lines: Sequence[str]) -> float:
        """Share (0-1) of sample lines this format recognises."""

    @abc.abstractmethod
    def parse(self, source: LogSource, stats: LogStats, options: ParseOptions) -> None:
        """Parse the whole file into ``stats`` (counting lines, bytes, parsed and skipped lines)."""


class LineFormat(LogFormat):
    """A format parsed one line at a time in Python."""

    @abc.abstractmethod
    def handler(self, stats: LogStats, source_name: str) -> LineHandler:
        """A fresh per-file line handler."""

    def finish(self, stats: LogStats) -> None:
        """Called after the last line of a file (flush multi-line state)."""

    def sniff(self, lines: Sequence[str]) -> float:
        """Share of sample lines the handler accepts, parsed into a throw-away LogStats."""
        if not lines:
            return 0.0
        handle = self.handler(LogStats(), "sniff")
        return sum(1 for line in lines if handle(line)) / len(lines)

    def parse(self, source: LogSource, stats: LogStats, options: ParseOptions) -> None:
        """Feed every line to the handler; blank lines are ignored, others that do not fit are skipped."""
        stats.source = source.name
        handle = self.handler(stats, source.name)
        parsed = mismatched = 0
        for line in iter_lines(source, stats):
            if not line.strip():
                continue  # blank lines are neither parsed nor skipped
            if handle(line):
                parsed += 1
            else:
                mismatched += 1
        self.finish(stats)
        stats.parsed += parsed
        if mismatched:
            stats.skip(SKIP_MISMATCH, mismatched)


class DatedLineFormat(LineFormat):
    """A line format whose timestamps may lack a year (syslog, ``Nov 29 10:00:00``): ``year`` fills it in."""

    def __init__(self, year: int = 1970) -> None:
        self.year = year
