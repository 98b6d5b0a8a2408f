"""Server-side stage times from response headers: W3C ``Server-Timing`` and Envoy's upstream service time.

What a peer sends is bounded before use: a header value is read up to :data:`MAX_HEADER_CHARS`, at most
:data:`MAX_METRICS` metrics of it, and a duration counts only as a finite number from 0 to :data:`MAX_STAGE_MS`
(``dur=1e308``, ``inf`` or a 400-digit number are not durations).
"""

from __future__ import annotations

from infradoctor.bounded import read_float

ENVOY_STAGE = "envoy_upstream"
"""Stage name given to ``x-envoy-upstream-service-time`` (milliseconds the upstream took, seen by Envoy)."""

MAX_HEADER_CHARS = 4096
"""Characters of a ``Server-Timing`` value read (the rest is ignored)."""
MAX_METRICS = 32
"""Metrics of one ``Server-Timing`` value read."""
MAX_STAGE_MS = 86_400_000.0
"""Longest stage duration taken as one (a day, in ms)."""

TOTAL_NAMES = ("total", "app", "server")
"""Server-Timing metric names taken as the server's total time, in this order of preference."""


def parse_server_timing(value: str) -> dict[str, float]:
    """Stage durations in ms from a ``Server-Timing`` value (``db;dur=53, app;desc="x";dur=47.2``).

    Metrics without a usable ``dur`` are skipped; a repeated name keeps its first duration, as the spec says.
    """
    out: dict[str, float] = {}
    for metric in _split_outside_quotes(value[:MAX_HEADER_CHARS], ",")[:MAX_METRICS]:
        parts = _split_outside_quotes(metric, ";")
        if not parts:
            continue
        name = parts[0].strip()
        if not name or name in out:
            continue
        for param in parts[1:]:
            key, _, raw = param.partition("=")
            if key.strip().lower() != "dur":
                continue
            duration = read_float(raw.strip().strip('"'), low=0.0, high=MAX_STAGE_MS)
            if duration is not None:
                out[name] = duration
            break
    return out


def parse_envoy_upstream_time(value: str) -> float | None:
    """``x-envoy-upstream-service-time`` in ms, or None when it is not a duration."""
    return read_float(value.strip()[:64], low=0.0, high=MAX_STAGE_MS)


def server_total_ms(stages: dict[str, float]) -> float | None:
    """The server's own total time: a ``total``-like metric when present, else the sum of the stages."""
    for name in TOTAL_NAMES:
        if name in stages:
            return stages[name]
    if ENVOY_STAGE in stages:
        return stages[ENVOY_STAGE]
    return sum(stages.values()) if stages else None


def stages_from_headers(headers: dict[str, str]) -> dict[str, float]:
    """All stage times (ms) found in captured response headers (names lower case)."""
    stages: dict[str, float] = {}
    timing = headers.get("server-timing")
    if timing:
        stages.update(parse_server_timing(timing))
    envoy = headers.get("x-envoy-upstream-service-time")
    if envoy:
        upstream = parse_envoy_upstream_time(envoy)
        if upstream is not None:
            stages[ENVOY_STAGE] = upstream
    return stages


def _split_outside_quotes(text: str, sep: str) -> list[str]:
    if '"' not in text:  # the common case: no quoted descriptions
        return [p for p in (p.strip() for p in text.split(sep)) if p]
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    escaped = False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
            continue
        if char == "\\" and quoted:
            current.append(char)
            escaped = True
            continue
        if char == '"':
            quoted = not quoted
        if char == sep and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in (p.strip() for p in parts) if p]
