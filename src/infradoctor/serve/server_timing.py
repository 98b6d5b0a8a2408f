"""The W3C ``Server-Timing`` header: ``name;dur=12.3, other;dur=4.5;desc="text"``.

Metric names are HTTP tokens (RFC 9110); durations are milliseconds. See https://www.w3.org/TR/server-timing/.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_token_cache: dict[str, str] = {}


def metric_name(name: str) -> str:
    """``name`` as an HTTP token: characters outside the token set become ``_`` (empty -> ``_``)."""
    cached = _token_cache.get(name)
    if cached is None:
        cached = "".join(c if c in _TOKEN_CHARS else "_" for c in name) or "_"
        if len(_token_cache) < 1024:
            _token_cache[name] = cached
    return cached


def format_server_timing(durations: Mapping[str, float], total_ms: float | None = None) -> str:
    """Header value listing each stage and, last, ``total``; durations in ms with 2 decimals."""
    parts = [f"{metric_name(name)};dur={ms:.2f}" for name, ms in durations.items()]
    if total_ms is not None:
        parts.append(f"total;dur={total_ms:.2f}")
    return ", ".join(parts)


_ENTRY = re.compile(r"\s*([!#$%&'*+\-.^_`|~0-9A-Za-z]+)\s*(;.*)?", re.S)
_PARAM = re.compile(r";\s*([!#$%&'*+\-.^_`|~0-9A-Za-z]+)\s*(?:=\s*(\"(?:[^\"\\]|\\.)*\"|[^;,\s]*))?")


def parse_server_timing(values: str | Iterable[str]) -> dict[str, float]:
    """Stage name -> duration in ms from one or more header values; entries without ``dur`` count as 0.

    Later duplicates add up, as a stage entered twice does; malformed entries are skipped.
    """
    out: dict[str, float] = {}
    for value in [values] if isinstance(values, str) else values:
        for raw in _split_entries(value):
            match = _ENTRY.fullmatch(raw)
            if match is None:
                continue
            name, params = match.group(1), match.group(2) or ""
            duration = 0.0
            for pmatch in _PARAM.finditer(params):
                if pmatch.group(1).lower() == "dur" and pmatch.group(2):
                    try:
                        duration = float(pmatch.group(2).strip('"'))
                    except ValueError:
                        duration = 0.0
                    break
            out[name] = out.get(name, 0.0) + duration
    return out


def _split_entries(value: str) -> list[str]:
    """Split on commas outside quoted strings."""
    entries: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            entries.append("".join(current))
            current = []
            continue
        current.append(char)
    entries.append("".join(current))
    return [e for e in entries if e.strip()]
