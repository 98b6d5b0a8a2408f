"""Log formats behind one interface (:class:`LogFormat`), per-file sniffing, and the line router that feeds them."""

from __future__ import annotations

from collections.abc import Sequence

from infradoctor.logs.formats.base import LineContext, LogFormat, ParseOptions
from infradoctor.logs.formats.layout import FormatError
from infradoctor.logs.formats.router import (
    FORMAT_NAMES,
    SNIFF_THRESHOLD,
    FileChoice,
    FileReport,
    candidates,
    choose,
    parse_source,
    read_lines,
)

__all__ = ["FORMAT_NAMES", "SNIFF_THRESHOLD", "FileChoice", "FileReport", "FormatError", "LineContext", "LogFormat",
           "ParseOptions", "candidates", "choose", "choose_format", "parse_source", "read_lines"]


def choose_format(
    name: str,
    sample: Sequence[str],
    *,
    nginx_log_format: str | None = None,
    envoy_log_format: str | None = None,
    year: int = 1970,
) -> tuple[LogFormat, float]:
    """The primary format of a file whose first lines are ``sample``, and the share of them it reads.

    See :func:`~infradoctor.logs.formats.router.choose` (which also gives the fallbacks and envelopes).

    Raises:
        FormatError: a given log format does not compile, or ``name`` is unknown.
    """
    choice = choose(name, sample, nginx_log_format=nginx_log_format, envoy_log_format=envoy_log_format, year=year)
    return choice.primary, choice.share
