"""Inline SVG charts for the self-contained HTML report (no JavaScript, no network, text escaped)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#2e86c1", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#d4ac0d")
WIDTH, HEIGHT = 560, 280
LEFT, RIGHT, TOP, BOTTOM = 62, 16, 28, 58
MIN_TICK_PX = 28
"""Labelled ticks closer than this (pixels) collide or crowd: fewer are drawn."""
MAX_MARKED_POINTS = 40
"""A series with more points than this is drawn as a line only (no dot per point)."""
MAX_BAR_LABEL_PX = 200
"""Bar labels wider than this are cut (the whole label is the text's tooltip)."""
CHAR_PX = 0.62
"""Width of a character in ems, generous for digits and lower case in a sans-serif face (room is kept for it)."""


def text_width(text: str, font_size: float) -> float:
    """The room a label needs, in pixels (an estimate that errs wide)."""
    return len(text) * font_size * CHAR_PX


def _clip(text: str, room_px: float, font_size: float) -> str:
    """``text`` cut with an ellipsis to fit ``room_px``."""
    if text_width(text, font_size) <= room_px:
        return text
    keep = max(1, int(room_px / (font_size * CHAR_PX)) - 1)
    return text[:keep] + "…"


@dataclass(frozen=True)
class Series:
    """One line of a chart."""

    name: str
    """Legend text."""
    points: Sequence[tuple[float, float]]
    """(x, y) pairs."""
    dashed: bool = False
    """Draw dashed (e.g. the before run)."""


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k steps) from at or below ``lo`` to at or above ``hi``."""
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0]
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = min((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), default=raw)
    value = math.floor(lo / step) * step
    ticks = []
    for _ in range(count * 3):
        ticks.append(round(value, 10))
        if value >= hi - step * 1e-9:
            break  # the last tick is at or above the data: no series is drawn above the axis top
        value += step
    return ticks


def _log_ticks(lo: float, hi: float, span_px: float = HEIGHT - TOP - BOTTOM) -> list[float]:
    """Ticks spanning [lo, hi] (both > 0) for a log axis of ``span_px`` pixels, no two closer than ``MIN_TICK_PX``.

    1-2-5 ticks where they fit, else every decade, else every second (third ...) decade; the first tick is at or
    below ``lo`` and the last at or above ``hi``, so the axis ends on labelled values.
    """
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    choices: list[tuple[tuple[float, ...], int]] = [((1.0, 2.0, 5.0), 1), ((1.0,), 1)]
    choices += [((1.0,), step) for step in range(2, max(2, last - first) + 1)]
    ticks: list[float] = []
    for mantissas, step in choices:
        start = first - (first % step)
        candidates = [m * 10.0**e for e in range(start, last + step, step) for m in mantissas]
        inside = [t for t in candidates if lo <= t <= hi]
        below = [t for t in candidates if t < lo]
        above = [t for t in candidates if t > hi]
        ticks = ([below[-1]] if below else []) + inside + ([above[0]] if above else [])
        logs = [math.log10(t) for t in ticks]
        span = logs[-1] - logs[0]
        if len(ticks) < 2 or span <= 0:
            return ticks
        if min(b - a for a, b in zip(logs, logs[1:], strict=False)) / span * span_px >= MIN_TICK_PX:
            return ticks
    return ticks


def _fmt(value: float) -> str:
    """A tick label: 1.5k, 250, 2.5, 0.05 (never scientific notation)."""
    magnitude = abs(value)
    if magnitude >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if magnitude >= 1000:
        return f"{value / 1000:g}k"
    if magnitude == 0 or magnitude >= 0.001:
        return f"{value:.4g}"
    return f"{value:.6f}".rstrip("0")


@dataclass(frozen=True)
class Marker:
    """A vertical line at one x value (e.g. a run's knee), with a short label."""

    x: float
    """Where, in data units."""
    label: str
    """Text beside the line."""


def line_chart(  # noqa: C901 - axes, ticks, series and markers of one chart
    title: str,
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    log_y: bool = False,
    markers: Sequence[Marker] = (),
) -> str:
    """A line chart with axes, round ticks, a legend and optional markers; empty when there is nothing to draw.

    ``log_y`` draws the y axis on a log scale (latency across loads that differ by orders of magnitude: a linear
    axis flattens the fast run onto zero). Every point is kept inside the plot area.
    """
    points = [(x, y) for s in series for x, y in s.points if math.isfinite(x) and math.isfinite(y)]
    if log_x:
        points = [(x, y) for x, y in points if x > 0]
    if log_y:
        points = [(x, y) for x, y in points if y > 0]
    if not points:
        return ""

    def tx(x: float) -> float:
        return math.log10(max(x, 1e-12)) if log_x else x

    def ty(y: float) -> float:
        return math.log10(max(y, 1e-12)) if log_y else y

    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    y_ticks = _log_ticks(min(ys), max(ys), plot_h) if log_y else _nice_ticks(0.0, max(ys) or 1.0)
    y_lo, y_hi = ty(y_ticks[0]), ty(y_ticks[-1])
    if y_hi <= y_lo:
        y_hi = y_lo + 1.0
    if log_x:
        x_ticks = sorted(set(xs))
        x_lo, x_hi = tx(min(xs)), tx(max(xs))
    else:
        x_ticks = _nice_ticks(min(xs), max(xs))
        x_lo, x_hi = x_ticks[0], x_ticks[-1]
    if x_hi <= x_lo:
        x_hi = x_lo + 1.0

    def px(x: float) -> float:
        return LEFT + min(1.0, max(0.0, (tx(x) - x_lo) / (x_hi - x_lo))) * plot_w

    def py(y: float) -> float:
        return TOP + plot_h - min(1.0, max(0.0, (ty(y) - y_lo) / (y_hi - y_lo))) * plot_h

    legend, legend_rows = _legend([s.name for s in series], y=HEIGHT - 8)
    parts = [_open(title, HEIGHT + 14 * (legend_rows - 1))]
    for tick in y_ticks:
        y = py(tick)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="10">{_fmt(tick)}</text>')
    last_px = -1e9
    for x in x_ticks:
        where = px(x)
        if where - last_px < MIN_TICK_PX:  # labels closer than this collide: skip
            continue
        last_px = where
        label = _fmt(x)
        at, anchor = (where, "middle") if where + text_width(label, 10) / 2 <= WIDTH - 2 else (WIDTH - 2.0, "end")
        parts.append(
            f'<text x="{at:.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="{anchor}" font-size="10">{label}</text>'
        )
    scale = " (log scale)" if log_y else ""
    parts.append(_axes(x_label, y_label + scale))
    parts += _markers([m for m in markers if not (log_x and m.x <= 0)], px)
    drawable = set(points)
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts = [(px(x), py(y)) for x, y in s.points if (x, y) in drawable]
        if not pts:
            continue
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        if len(pts) <= MAX_MARKED_POINTS:  # beyond, the dots merge into a thick dotted band
            parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>' for x, y in pts]
    parts.append(legend)
    parts.append("</svg>")
    return "".join(parts)


def _markers(markers: Sequence[Marker], px: Callable[[float], float]) -> list[str]:
    """Dashed vertical lines with their labels inside the chart.

    A label sits right of its line, left of it near the chart's right edge, one row lower where it would overlap
    the label before.
    """
    parts: list[str] = []
    rows: list[float] = []  # right edge of the last label on each row
    for marker in sorted(markers, key=lambda m: m.x):
        mx = px(marker.x)
        parts.append(f'<line x1="{mx:.1f}" y1="{TOP}" x2="{mx:.1f}" y2="{HEIGHT - BOTTOM}" stroke="#c0392b" '
                     'stroke-dasharray="3 3"/>')
        label = _clip(marker.label, WIDTH - LEFT - RIGHT - 6, 10)
        width = text_width(label, 10)
        left = mx + 3 if mx + 3 + width <= WIDTH - 2 else mx - 3 - width
        row = next((i for i, right in enumerate(rows) if left > right + 4), len(rows))
        if row == len(rows):
            rows.append(0.0)
        rows[row] = left + width
        anchor = "start" if left > mx else "end"
        x = left if anchor == "start" else mx - 3
        parts.append(f'<text x="{x:.1f}" y="{TOP + 10 + 12 * row}" font-size="10" fill="#c0392b" '
                     f'text-anchor="{anchor}">{escape(label)}</text>')
    return parts


def stacked_bars(title: str, bars: Sequence[tuple[str, Sequence[tuple[str, float]]]], *, unit: str) -> str:
    """Horizontal stacked bars, one per (label, [(part, value)]); parts share colours across bars by name."""
    bars = [(label, [(p, v) for p, v in parts if v > 0]) for label, parts in bars]
    bars = [b for b in bars if b[1]]
    if not bars:
        return ""
    names: list[str] = []
    for _, parts in bars:
        for part, _ in parts:
            if part not in names:
                names.append(part)
    total_max = max(sum(v for _, v in parts) for _, parts in bars) or 1.0
    row_h = 26
    height = TOP + len(bars) * (row_h + 10) + 50
    legend, legend_rows = _legend(names, y=height - 18)
    height += 14 * (legend_rows - 1)
    # the labels' room first, then the bars get what is left: the longest bar's total stays inside the chart
    label_w = min(max(text_width(label, 11) for label, _ in bars) + 12, MAX_BAR_LABEL_PX)
    totals = [f"{_fmt(sum(v for _, v in parts))} {unit}".rstrip() for _, parts in bars]
    value_w = max(text_width(t, 10) for t in totals) + 8
    plot_w = WIDTH - label_w - RIGHT - value_w
    parts_svg = [_open(title, height)]
    for i, ((label, parts), total_text) in enumerate(zip(bars, totals, strict=True)):
        y = TOP + i * (row_h + 10)
        shown = _clip(label, label_w - 8, 11)
        tip = f"<title>{escape(label)}</title>" if shown != label else ""
        parts_svg.append(
            f'<text x="{label_w - 6:.1f}" y="{y + row_h / 2 + 4:.1f}" text-anchor="end" font-size="11">'
            f"{escape(shown)}{tip}</text>"
        )
        x = float(label_w)
        for part, value in parts:
            w = value / total_max * plot_w
            color = PALETTE[names.index(part) % len(PALETTE)]
            tip = escape(f"{part}: {_fmt(value)} {unit}")
            parts_svg.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h}" fill="{color}"><title>{tip}</title></rect>'
            )
            x += w
        parts_svg.append(
            f'<text x="{x + 4:.1f}" y="{y + row_h / 2 + 4:.1f}" font-size="10">{escape(total_text)}</text>'
        )
    parts_svg.append(legend)
    parts_svg.append("</svg>")
    return "".join(parts_svg)


def _open(title: str, height: int = HEIGHT) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-label="{escape(title)}" font-family="system-ui,sans-serif" class="chart">'
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="600">{escape(_clip(title, WIDTH - LEFT - 4, 13))}</text>'
    )


def _axes(x_label: str, y_label: str) -> str:
    return (
        f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" stroke="#555"/>'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#555"/>'
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - BOTTOM + 30}" text-anchor="middle" font-size="11">'
        f"{escape(x_label)}</text>"
        f'<text x="14" y="{(TOP + HEIGHT - BOTTOM) / 2:.0f}" text-anchor="middle" font-size="11" '
        f'transform="rotate(-90 14 {(TOP + HEIGHT - BOTTOM) / 2:.0f})">{escape(y_label)}</text>'
    )


def _legend(names: Sequence[str], y: float = HEIGHT - 8) -> tuple[str, int]:
    """Legend entries left to right, wrapping onto new rows; returns the SVG and the number of rows."""
    parts = []
    x, row = float(LEFT), 0
    for i, full in enumerate(names):
        name = _clip(full, WIDTH - LEFT - RIGHT - 14, 10)
        width = 14 + text_width(name, 10) + 10
        if x + width > WIDTH - RIGHT and x > LEFT:
            x, row = float(LEFT), row + 1
        yy = y + 14 * row
        color = PALETTE[i % len(PALETTE)]
        parts.append(f'<rect x="{x:.0f}" y="{yy - 9:.0f}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x + 14:.0f}" y="{yy:.0f}" font-size="10">{escape(name)}</text>')
        x += width
    return "".join(parts), row + 1
