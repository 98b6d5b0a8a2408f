"""Bounded readers for what others write: numbers, text fields and JSON from logs, XML, HTTP peers and records.

Every parser of untrusted input reads numbers through :func:`read_int` / :func:`read_float` (finite, in range, of
sane length, else ``None``: "not available", never an exception), cuts fields with :func:`cut` (saying that it
cut), and loads JSON with :func:`load_json` (size bounded, too deep is an error). A 400-digit integer, ``1e999``,
``inf``, ``1.2.3 MiB`` or a 5,000-deep JSON line cost nothing and crash nothing.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_NUMBER_CHARS = 64
"""Longer numeric text is not a measurement (a 400-digit "integer" is rejected without converting it)."""

MAX_JSON_CHARS = 4_000_000
"""JSON text longer than this is refused."""

_INT = re.compile(r"[+-]?\d{1,30}")
_FLOAT = re.compile(r"[+-]?(?:\d{1,30}(?:\.\d{0,30})?|\.\d{1,30})(?:[eE][+-]?\d{1,3})?")


def _number_text(value: str | bytes, pattern: re.Pattern[str]) -> str | None:
    """The number's text, stripped, when it fits ``pattern`` and :data:`MAX_NUMBER_CHARS`; else None."""
    text = (value.decode("ascii", "replace") if isinstance(value, bytes) else value).strip()
    if len(text) > MAX_NUMBER_CHARS or not pattern.fullmatch(text):
        return None
    return text


def read_int(value: Any, *, low: int | None = None, high: int | None = None) -> int | None:
    """An integer from text or a number, within ``[low, high]`` when given; None when it is not one.

    Accepts ``int`` (not ``bool``), integral ``float`` and decimal text with optional sign and surrounding
    space. Text of more than :data:`MAX_NUMBER_CHARS` characters is refused before conversion.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            return None
        number = int(value)
    elif isinstance(value, (str, bytes)):
        text = _number_text(value, _INT)
        if text is None:
            return None
        number = int(text)
    else:
        return None
    if (low is not None and number < low) or (high is not None and number > high):
        return None
    return number


def read_float(value: Any, *, low: float | None = None, high: float | None = None) -> float | None:
    """A finite float from text or a number, within ``[low, high]`` when given; None when it is not one.

    ``nan``, ``inf``, ``1e999`` (overflows to inf), ``1.2.3`` and over-long text give None.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if isinstance(value, int) and abs(value) > 10**300:
            return None
        number = float(value)
    elif isinstance(value, (str, bytes)):
        text = _number_text(value, _FLOAT)
        if text is None:
            return None
        number = float(text)
    else:
        return None
    if not math.isfinite(number):
        return None
    if (low is not None and number < low) or (high is not None and number > high):
        return None
    return number


def cut(text: str, limit: int) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut), and whether it was cut."""
    if len(text) <= limit:
        return text, False
    return text[: max(0, limit - 1)] + "\u2026", True


def load_json(text: str | bytes, *, max_chars: int = MAX_JSON_CHARS) -> Any:
    """``json.loads`` with a bounded size; raises ValueError (never RecursionError) for too deep or too long text.

    Python's parser stops deep nesting itself with RecursionError (in linear time); that becomes a ValueError
    like any other malformed JSON.
    """
    if len(text) > max_chars:
        raise ValueError(f"JSON of {len(text)} characters is over the limit of {max_chars}")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    r"""Text that is safe to show on a terminal: control characters become visible escapes.

    Escape sequences in a log file's name, a label, a log line or a peer's header would otherwise reach the
    terminal raw (retitle it, clear the screen, hide text): C0 controls but newline and tab, DEL, C1 controls
    (incl. the one-byte CSI) and Unicode bidirectional overrides are shown as ``\x1b`` / ``\u202e``.
    """
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        text)


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def json_printable(text: str) -> str:
    r"""JSON text with DEL, C1 controls and bidi overrides as ``\u`` escapes, as C0 controls already are.

    ``json.dumps(..., ensure_ascii=False)`` leaves them raw. Escaped, it is the same document (it loads to the same
    values) and safe to show on a terminal: these characters only occur inside JSON strings, where ``\u009b``
    means the same.
    """
    if not _JSON_UNSAFE.search(text):
        return text
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def printable_deep(value: Any) -> Any:
    """:func:`printable` over every string (and mapping key) of a JSON-like value."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(str(k)): printable_deep(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable_deep(v) for v in value]
    return value
