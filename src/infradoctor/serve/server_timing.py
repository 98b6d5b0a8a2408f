"""The W3C ``Server-Timing`` header: ``name;dur=12.3, other;dur=4.5;desc="text"``.

Metric names are HTTP tokens (RFC 9110); durations are milliseconds. See https://www.w3.org/TR/server-timing/.
Parsing lives with the client side, in :mod:`infradoctor.load.servertiming`.
"""

from __future__ import annotations

from collections.abc import Mapping

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
