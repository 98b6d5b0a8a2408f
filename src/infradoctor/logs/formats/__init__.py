"""Log formats behind one interface (:class:`LogFormat`), and per-file sniffing for ``--format auto``."""

from __future__ import annotations

from collections.abc import Sequence

from infradoctor.logs.formats.access import AccessFormat
from infradoctor.logs.formats.base import LogFormat, ParseOptions
from infradoctor.logs.formats.haproxy import HaproxyFormat
from infradoctor.logs.formats.jsonl import JsonLinesFormat
from infradoctor.logs.formats.kernel import KernelFormat
from infradoctor.logs.formats.layout import (
    ENVOY_PRESETS,
    NGINX_COMBINED,
    NGINX_PRESETS,
    FormatError,
    compile_envoy,
    compile_nginx,
    derive_nginx_format,
)
from infradoctor.logs.formats.nginx_error import NginxErrorFormat
from infradoctor.logs.formats.text import TextFormat

FORMAT_NAMES = ("auto", "nginx", "nginx-error", "envoy", "haproxy", "jsonl", "kernel", "text")
"""Values of ``--format``."""
SNIFF_THRESHOLD = 0.5
"""A format must recognise at least this share of a file's first lines to be chosen; else the file is ``text``."""

__all__ = ["FORMAT_NAMES", "FormatError", "LogFormat", "ParseOptions", "choose_format", "candidates"]


def envoy_formats(envoy_log_format: str | None = None) -> list[LogFormat]:
    """The user's Envoy format (when given) and the presets."""
    formats: list[LogFormat] = []
    if envoy_log_format:
        formats.append(AccessFormat("envoy", compile_envoy(envoy_log_format)))
    formats += [AccessFormat("envoy", compile_envoy(fmt)) for fmt in ENVOY_PRESETS.values()]
    return formats


def candidates(
    nginx_log_format: str | None = None, year: int = 1970, envoy_log_format: str | None = None
) -> list[LogFormat]:
    """Every format ``auto`` considers, most specific first (ties go to the earlier one).

    Raises:
        FormatError: ``nginx_log_format`` or ``envoy_log_format`` does not compile.
    """
    formats: list[LogFormat] = []
    if nginx_log_format:
        formats.append(AccessFormat("nginx", compile_nginx(nginx_log_format)))
    formats += [AccessFormat("nginx", compile_nginx(fmt)) for fmt in NGINX_PRESETS.values()]
    formats += envoy_formats(envoy_log_format)
    formats += [
        HaproxyFormat(),
        NginxErrorFormat(year),
        JsonLinesFormat(year),
        KernelFormat(year),
    ]
    return formats


def _derived_nginx(sample: Sequence[str]) -> AccessFormat | None:
    """An nginx format derived from the first sample line that starts like ``combined`` (custom fields after it)."""
    for line in sample[:5]:
        derived = derive_nginx_format(line)
        if derived is not None:
            try:
                return AccessFormat("nginx", compile_nginx(derived))
            except FormatError:
                return None
    return None


def choose_format(
    name: str,
    sample: Sequence[str],
    *,
    nginx_log_format: str | None = None,
    envoy_log_format: str | None = None,
    year: int = 1970,
) -> tuple[LogFormat, float]:
    """The format to parse a file with, and the share of its sample lines that format recognised.

    ``name`` is a ``--format`` value; with ``auto`` every candidate sniffs the sample and the best wins (``text``
    when none reaches :data:`SNIFF_THRESHOLD`). ``nginx`` uses ``nginx_log_format`` when given, else the preset
    that fits the sample best (``combined`` when none does); ``envoy`` likewise with ``envoy_log_format``.

    Raises:
        FormatError: a given log format does not compile, or ``name`` is unknown.
    """
    if name == "text":
        return TextFormat(year), 1.0
    pool: list[LogFormat]
    if name == "auto":
        pool = candidates(nginx_log_format, year, envoy_log_format)
    elif name == "nginx":
        if nginx_log_format:
            given = AccessFormat("nginx", compile_nginx(nginx_log_format))
            return given, given.sniff(sample)
        pool = [AccessFormat("nginx", compile_nginx(fmt)) for fmt in NGINX_PRESETS.values()]
    elif name == "envoy":
        pool = [*envoy_formats(envoy_log_format), JsonLinesFormat(year)]
    elif name == "haproxy":
        pool = [HaproxyFormat()]
    elif name == "nginx-error":
        pool = [NginxErrorFormat(year)]
    elif name == "jsonl":
        pool = [JsonLinesFormat(year)]
    elif name == "kernel":
        pool = [KernelFormat(year)]
    else:
        raise FormatError(f"unknown format {name!r}; expected one of {', '.join(FORMAT_NAMES)}")
    best: LogFormat | None = None
    best_score = -1.0
    for fmt in pool:
        score = fmt.sniff(sample)
        if score > best_score:
            best, best_score = fmt, score
        if score == 1.0:
            break
    assert best is not None
    if name in ("auto", "nginx") and best_score < SNIFF_THRESHOLD:
        derived = _derived_nginx(sample)
        if derived is not None:
            score = derived.sniff(sample)
            if score >= SNIFF_THRESHOLD:
                return derived, score
    if name == "auto" and best_score < SNIFF_THRESHOLD:
        return TextFormat(year), 1.0
    if name == "nginx" and best_score <= 0:
        return AccessFormat("nginx", compile_nginx(NGINX_COMBINED)), 0.0
    return best, best_score
