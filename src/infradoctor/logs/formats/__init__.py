"""Log formats behind one interface (:class:`LogFormat`), per-file sniffing, and the line router that feeds them.

Names are exported lazily (the envelope reader imports the timestamp parsers of this package; importing the router
here would make that a cycle).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
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

__getattr__ = lazy_exports(__name__, {
    "LineContext": "base", "LogFormat": "base", "ParseOptions": "base", "FormatError": "layout",
    "FORMAT_NAMES": "router", "SNIFF_THRESHOLD": "router", "FileChoice": "router", "FileReport": "router",
    "candidates": "router", "choose": "router", "parse_source": "router", "read_lines": "router",
})

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
    from infradoctor.logs.formats.router import choose

    choice = choose(name, sample, nginx_log_format=nginx_log_format, envoy_log_format=envoy_log_format, year=year)
    return choice.primary, choice.share
