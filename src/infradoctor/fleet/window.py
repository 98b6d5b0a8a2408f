"""The incident window from ``--window`` / ``--from`` / ``--to``, its step, and the ``--changes`` file."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

from infradoctor.bounded import cut, read_float
from infradoctor.fleet.evidence import Change, Window

MAX_WINDOW_S = 31 * 86400.0
"""Longest window (a month)."""
MIN_STEP_S = 15.0
"""Finest step: the usual scrape interval (a finer one only repeats samples)."""
TARGET_POINTS = 120
"""Points per range query the step aims at."""
MAX_CHANGES = 10_000
"""Changes read from ``--changes`` at most."""
_DURATION = re.compile(r"(?:(\d{1,6})([smhdw]))+")
_PART = re.compile(r"(\d{1,6})([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_NICE_STEPS = (15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


class WindowError(ValueError):
    """The window options cannot be read (the message says which and why)."""


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``1h30m``, ``2d`` in seconds."""
    value = text.strip().lower()
    if not _DURATION.fullmatch(value):
        raise WindowError(f"not a duration: {text[:40]!r} (expected e.g. 30m, 1h, 2d)")
    seconds = float(sum(int(n) * _UNITS[u] for n, u in _PART.findall(value)))
    if seconds <= 0:
        raise WindowError(f"duration must be positive: {text!r}")
    return seconds


def parse_time(text: str, now: float) -> float:
    """ISO-8601 (``2026-11-29T10:00:00Z``, with an offset, or naive = UTC), unix seconds, ``now`` or ``now-2h``."""
    value = text.strip()
    lowered = value.lower()
    if lowered == "now":
        return now
    if lowered.startswith("now-"):
        return now - parse_duration(lowered[4:])
    number = read_float(value, low=0, high=4e9)
    if number is not None:
        return number
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise WindowError(f"not a time: {cut(value, 40)[0]!r} (expected ISO-8601, unix seconds, now, now-1h)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def nice_step(seconds: float) -> float:
    """A step giving about :data:`TARGET_POINTS` points, rounded to a usual value, at least :data:`MIN_STEP_S`."""
    raw = max(MIN_STEP_S, seconds / TARGET_POINTS)
    return float(next((s for s in _NICE_STEPS if s >= raw), _NICE_STEPS[-1]))


def make_window(now: float, *, window: str | None = None, start: str | None = None, end: str | None = None,
                step: str | None = None) -> Window:
    """The window: ``--window`` back from ``--to`` (default now), or ``--from``..``--to``."""
    stop = parse_time(end, now) if end else now
    if start and window:
        raise WindowError("give --window or --from, not both")
    begin = parse_time(start, now) if start else stop - parse_duration(window or "1h")
    if begin >= stop:
        raise WindowError("the window ends before it starts (--from must be before --to)")
    if stop - begin > MAX_WINDOW_S:
        raise WindowError(f"the window is longer than {MAX_WINDOW_S / 86400:.0f} days")
    step_s = parse_duration(step) if step else nice_step(stop - begin)
    if (stop - begin) / step_s > 11000:  # Prometheus refuses more than 11,000 points per series
        raise WindowError(f"--step {step} gives more than 11,000 points over the window")
    return Window(start=begin, end=stop, step_s=step_s)


def read_changes(path: str, now: float) -> tuple[list[Change], list[str]]:
    """Changes from a file, oldest first, and the lines that could not be read (bounded).

    JSON lines (``{"at": ..., "description": ..., "node": ...}``) or text lines ``TIME description`` (TIME as in
    :func:`parse_time`); ``#`` starts a comment.
    """
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise WindowError(f"cannot read --changes {path}: {exc.strerror or exc}") from None
    changes: list[Change] = []
    bad: list[str] = []
    for number, raw in enumerate(text.splitlines()[: MAX_CHANGES * 2], start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            changes.append(_change(line, now))
        except (WindowError, ValueError, TypeError) as exc:
            if len(bad) < 20:
                bad.append(f"{path}:{number}: {cut(str(exc), 120)[0]}")
        if len(changes) >= MAX_CHANGES:
            break
    changes.sort(key=lambda c: c.at)
    return changes, bad


def _change(line: str, now: float) -> Change:
    if line.startswith("{"):
        doc = json.loads(cut(line, 20000)[0])
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        at = doc.get("at") or doc.get("time") or doc.get("timestamp")
        if at is None:
            raise ValueError("no 'at' time")
        description = str(doc.get("description") or doc.get("change") or doc.get("what") or "change")
        node = doc.get("node") or doc.get("instance")
        return Change(parse_time(str(at), now), cut(description, 300)[0], str(node)[:200] if node else None)
    when, _, rest = line.partition(" ")
    if "," in when and not rest:
        when, _, rest = line.partition(",")
    return Change(parse_time(when.rstrip(","), now), cut(rest.strip() or "change", 300)[0])
