"""Inline SVG charts for the self-contained HTML report (no JavaScript, no network, text escaped)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#2e86c1", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#d4ac0d")
WIDTH, HEIGHT = 560, 280
LEFT, RIGHT, TOP, BOTTOM = 62, 16, 28, 58


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
    if not math.isfinite(lo) or not math.isfinite(hi):
        return [0.0]
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = min((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), default=raw)
    start = math.floor(lo / step) * step
    ticks = []
    value = start
    for _ in range(count * 3):
        if value > hi + step * 0.5:
            break
        ticks.append(round(value, 10))
        value += step
    return ticks


def _fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def line_chart(title: str, series: Sequence[Series], *, x_label: str, y_label: str, log_x: bool = False) -> str:
    """A line chart with axes, ticks and a legend; empty string when there is nothing to draw."""
    points = [(x, y) for s in series for x, y in s.points if math.isfinite(x) and math.isfinite(y)]
    if not points:
        return ""

    def tx(x: float) -> float:
        return math.log10(max(x, 1e-9)) if log_x else x

    xs = [tx(x) for x, _ in points]
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_hi = x_lo + 1.0
    y_ticks = _nice_ticks(0.0, max(y for _, y in points) * 1.05 or 1.0)
    y_hi = y_ticks[-1] or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (tx(x) - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return TOP + plot_h - (y / y_hi) * plot_h

    legend, legend_rows = _legend([s.name for s in series], y=HEIGHT - 8)
    parts = [_open(title, HEIGHT + 14 * (legend_rows - 1))]
    for tick in y_ticks:
        y = py(tick)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="10">{_fmt(tick)}</text>')
    x_values = sorted({x for x, _ in points})
    if len(x_values) > 8:
        step = math.ceil(len(x_values) / 8)
        x_values = x_values[::step]
    for x in x_values:
        parts.append(
            f'<text x="{px(x):.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="middle" font-size="10">{_fmt(x)}</text>'
        )
    parts.append(_axes(x_label, y_label))
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        pts = [(px(x), py(y)) for x, y in s.points if math.isfinite(x) and math.isfinite(y)]
        if not pts:
            continue
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>' for x, y in pts]
    parts.append(legend)
    parts.append("</svg>")
    return "".join(parts)


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
    label_w = 120
    plot_w = WIDTH - label_w - RIGHT - 10
    parts_svg = [_open(title, height)]
    for i, (label, parts) in enumerate(bars):
        y = TOP + i * (row_h + 10)
        parts_svg.append(
            f'<text x="{label_w - 6}" y="{y + row_h / 2 + 4:.1f}" text-anchor="end" font-size="11">'
            f"{escape(label)}</text>"
        )
        x = float(label_w)
        total = sum(v for _, v in parts)
        for part, value in parts:
            w = value / total_max * plot_w
            color = PALETTE[names.index(part) % len(PALETTE)]
            tip = escape(f"{part}: {value:.3g} {unit}")
            parts_svg.append(
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h}" fill="{color}"><title>{tip}</title></rect>'
            )
            x += w
        parts_svg.append(
            f'<text x="{x + 4:.1f}" y="{y + row_h / 2 + 4:.1f}" font-size="10">{total:.3g} {escape(unit)}</text>'
        )
    parts_svg.append(legend)
    parts_svg.append("</svg>")
    return "".join(parts_svg)


def _open(title: str, height: int = HEIGHT) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-label="{escape(title)}" font-family="system-ui,sans-serif" class="chart">'
        f'<text x="{LEFT}" y="16" font-size="13" font-weight="600">{escape(title)}</text>'
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
    for i, name in enumerate(names):
        width = 24 + 6.2 * len(name)
        if x + width > WIDTH - RIGHT and x > LEFT:
            x, row = float(LEFT), row + 1
        yy = y + 14 * row
        color = PALETTE[i % len(PALETTE)]
        parts.append(f'<rect x="{x:.0f}" y="{yy - 9:.0f}" width="10" height="10" fill="{color}"/>')
        parts.append(f'<text x="{x + 14:.0f}" y="{yy:.0f}" font-size="10">{escape(name)}</text>')
        x += width
    return "".join(parts), row + 1
