"""The report's SVG charts, parsed: log latency axis, knee markers, tick spacing, points and labels inside."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest

from infradoctor.report import charts
from infradoctor.report.svg import (
    HEIGHT,
    MIN_TICK_PX,
    TOP,
    WIDTH,
    Marker,
    Series,
    _log_ticks,
    line_chart,
    stacked_bars,
    text_width,
)
from infradoctor.result import new_result

NS = {"s": "http://www.w3.org/2000/svg"}
KNEE_RED = "#c0392b"


@dataclass(frozen=True)
class Label:
    text: str
    x: float
    y: float
    left: float
    right: float
    rotated: bool


def parse(svg: str) -> ET.Element:
    assert svg.startswith("<svg"), svg[:80]
    return ET.fromstring(svg)


def labels(root: ET.Element) -> list[Label]:
    """Every <text> with its horizontal extent (estimated from its length and font size, as the charts do)."""
    out = []
    for el in root.iter(f"{{{NS['s']}}}text"):
        text = el.text or ""
        size = float(el.get("font-size", "10"))
        x, y = float(el.get("x", "0")), float(el.get("y", "0"))
        width = text_width(text, size)
        anchor = el.get("text-anchor", "start")
        left = x - width if anchor == "end" else x - width / 2 if anchor == "middle" else x
        out.append(Label(text, x, y, left, left + width, "rotate" in (el.get("transform") or "")))
    return out


def assert_labels_inside(root: ET.Element) -> None:
    width = float(root.get("width", "0"))
    for label in labels(root):
        if label.rotated:
            continue
        assert label.left >= 0 and label.right <= width, (label, width)


def y_ticks(root: ET.Element) -> list[tuple[float, float]]:
    """(pixel y, value) of the y axis' tick labels (right-aligned left of the plot)."""
    return [(lb.y - 4, _value(lb.text)) for lb in labels(root) if lb.x < 62 and not lb.rotated and lb.text]


def x_tick_labels(root: ET.Element) -> list[Label]:
    return [lb for lb in labels(root) if abs(lb.y - (HEIGHT - 58 + 14)) < 0.5]


def _value(text: str) -> float:
    scale = {"k": 1e3, "M": 1e6}.get(text[-1:], 1.0)
    return float(text.rstrip("kM")) * scale


def circles(root: ET.Element) -> list[tuple[float, float]]:
    """Every drawn point: the dots, and the vertices of the lines (long series have no dots)."""
    dots = [(float(c.get("cx", "0")), float(c.get("cy", "0"))) for c in root.iter(f"{{{NS['s']}}}circle")]
    for line in root.iter(f"{{{NS['s']}}}polyline"):
        dots += [(float(x), float(y)) for x, y in (pair.split(",") for pair in line.get("points", "").split())]
    assert dots
    return dots


def load_run(label: str, points: list[tuple[int, float, float, float]], knee: float | None):
    """A stored ``load`` result: (concurrency, throughput, p50, p99) per point, as ``load`` writes them."""
    return new_result(
        "load", started_at="2026-11-29T10:00:00Z", duration_s=30.0, target={"url": "http://127.0.0.1:8000/predict"},
        metrics={
            "mode": "closed",
            "points": [{"label": f"c={c}", "mode": "closed", "offered": c, "concurrency": c, "throughput_rps": rps,
                        "latency_ms": {"count": 900, "p50": p50, "p99": p99}} for c, rps, p50, p99 in points],
            "knee": {"kind": "concurrency", "level": knee} if knee is not None else None,
            "headline": {},
        },
    ).with_(label=label)


# A serialized service (about 5 ms a request: 200 req/s, latency doubling with the clients) before, the same
# service after the fix (sub-millisecond until its knee at 16); latencies span 0.4 to 1,300 ms.
BASELINE = load_run("serve-baseline", [(1, 195.0, 5.1, 7.9), (2, 199.0, 10.2, 15.5), (4, 200.0, 20.3, 31.0),
                                       (8, 201.0, 40.1, 63.37), (16, 199.0, 80.9, 131.0), (32, 200.0, 161.0, 262.0),
                                       (64, 198.0, 322.0, 1_300.0)], knee=1)
AFTER = load_run("serve-after", [(1, 2_400.0, 0.41, 0.425), (2, 4_700.0, 0.42, 0.61), (4, 9_100.0, 0.44, 0.9),
                                 (8, 17_000.0, 0.47, 1.4), (16, 31_000.0, 0.52, 2.2), (32, 32_000.0, 1.0, 4.1),
                                 (64, 31_500.0, 2.0, 8.3)], knee=16)


def test_latency_vs_load_has_a_log_axis_with_the_knees_marked() -> None:
    root = parse(charts.latency_vs_load([BASELINE, AFTER]))
    texts = [lb.text for lb in labels(root)]
    assert "latency (ms) (log scale)" in texts
    ticks = y_ticks(root)
    values = [v for _, v in ticks]
    assert values[0] <= 0.41 and values[-1] >= 1_300  # the axis spans both runs, ends on labelled values
    ratios = {round(b / a, 6) for a, b in zip(values, values[1:], strict=False)}
    assert ratios <= {2.0, 2.5, 10.0, 100.0, 1000.0}, values  # 1-2-5 steps or whole decades: a log axis
    knees = [el for el in root.iter(f"{{{NS['s']}}}line") if el.get("stroke") == KNEE_RED]
    assert len(knees) == 2
    assert {"knee (serve-baseline)", "knee (serve-after)"} <= set(texts)


def test_tick_spacing_points_and_labels_stay_in_the_chart() -> None:
    root = parse(charts.latency_vs_load([BASELINE, AFTER]))
    ticks = y_ticks(root)
    gaps = [a - b for (a, _), (b, _) in zip(ticks, ticks[1:], strict=False)]
    assert gaps and min(gaps) >= MIN_TICK_PX - 0.2, gaps  # drawn top to bottom: y decreases
    xs = sorted(lb.x for lb in x_tick_labels(root))
    assert len(xs) >= 4 and min(b - a for a, b in zip(xs, xs[1:], strict=False)) >= MIN_TICK_PX
    top_tick = min(y for y, _ in ticks)
    assert all(cy >= top_tick - 0.05 for _, cy in circles(root))  # no point above the top tick
    assert_labels_inside(root)


def test_bar_totals_keep_their_room() -> None:
    """The longest bar's total was drawn at x=538 of 560 and cut ('0.425 ms' read '0.42')."""
    svg = stacked_bars("Latency per path (router vs direct)",
                       [("router", [("p50", 0.3), ("p99 - p50", 0.125)]), ("direct", [("p50", 0.2), ("p99 - p50", 0.1)])],
                       unit="ms")
    root = parse(svg)
    texts = [lb.text for lb in labels(root)]
    assert "0.425 ms" in texts and "0.3 ms" in texts
    assert_labels_inside(root)
    slow = parse(stacked_bars("Step time by phase", [("train-baseline", [("data", 50.0), ("forward", 13.37)]),
                                                     ("train-after", [("data", 1.0), ("forward", 13.0)])], unit="ms"))
    assert "63.37 ms" in [lb.text for lb in labels(slow)]
    assert_labels_inside(slow)
    rects = [float(r.get("x", "0")) + float(r.get("width", "0")) for r in slow.iter(f"{{{NS['s']}}}rect")
             if r.get("height") == "26"]
    total = next(lb for lb in labels(slow) if lb.text == "63.37 ms")
    assert max(rects) < total.left  # the label sits beside the bar, not over it


def test_long_bar_labels_and_legends_are_cut_with_the_whole_text_kept() -> None:
    name = "http://backend-number-one.internal.example:8000/v1/chat/completions"
    root = parse(stacked_bars("Latency per path (router vs direct)",
                              [(name, [("p50", 12.0), ("p99 - p50", 30.0)])], unit="ms"))
    assert_labels_inside(root)
    assert any(lb.text.endswith("…") for lb in labels(root))
    assert name in ET.tostring(root, encoding="unicode")  # as the label's tooltip
    long_legend = [Series("x" * 120, [(1, 1.0), (2, 2.0)]), Series("short", [(1, 2.0), (2, 3.0)])]
    assert_labels_inside(parse(line_chart("t", long_legend, x_label="x", y_label="y")))


def test_marker_labels_near_the_right_edge_or_together_stay_inside_and_apart() -> None:
    series = [Series("a p99", [(1, 1.0), (64, 80.0)])]
    markers = [Marker(64, "knee (a-very-long-run-label)"), Marker(64, "knee (another-run)"), Marker(1, "knee (b)")]
    root = parse(line_chart("Latency vs load", series, x_label="concurrency", y_label="latency (ms)", log_x=True,
                            log_y=True, markers=markers))
    assert_labels_inside(root)
    knee_labels = [lb for lb in labels(root) if lb.text.startswith("knee")]
    assert len(knee_labels) == 3
    for i, a in enumerate(knee_labels):
        for b in knee_labels[i + 1:]:
            assert a.y != b.y or a.right <= b.left or b.right <= a.left, (a, b)  # no two overlap


def test_memory_of_runs_of_different_lengths_shares_a_progress_axis() -> None:
    def run(label: str, steps: int, base: float):
        rows = [[s, base + 0.02 * s] for s in range(0, steps + 1, max(1, steps // 60))]
        return new_result("profile", started_at="2026-11-29T10:00:00Z", duration_s=9.0, target={"argv": ["python"]},
                          metrics={"memory": {"timeline": {"columns": ["step", "pss_mb"], "rows": rows}}},
                          ).with_(label=label)

    root = parse(charts.memory_over_steps([run("train-baseline", 62, 340.0), run("train-after", 849, 338.0)]))
    texts = [lb.text for lb in labels(root)]
    assert "% of the run's steps" in texts
    assert not list(root.iter(f"{{{NS['s']}}}circle"))  # 60-odd samples a run: lines, not bands of dots
    ticks = y_ticks(root)
    top_tick = min(y for y, _ in ticks)
    assert all(cy >= top_tick - 0.05 for _, cy in circles(root))
    gaps = [a - b for (a, _), (b, _) in zip(ticks, ticks[1:], strict=False)]
    assert min(gaps) >= MIN_TICK_PX - 0.2
    assert_labels_inside(root)


@pytest.mark.parametrize("lo,hi", [(0.4, 1_300.0), (0.001, 1e6), (3.0, 4.0), (1.0, 1.0), (0.05, 0.2), (2.0, 9e9)])
def test_log_ticks_are_spaced_and_span_the_data(lo: float, hi: float) -> None:
    span_px = HEIGHT - TOP - 58
    ticks = _log_ticks(lo, hi, span_px)
    assert ticks[0] <= lo and ticks[-1] >= hi
    if len(ticks) > 1:
        logs = [math.log10(t) for t in ticks]
        per_decade = span_px / (logs[-1] - logs[0])
        assert min(b - a for a, b in zip(logs, logs[1:], strict=False)) * per_decade >= MIN_TICK_PX


def test_no_chart_text_uses_scientific_notation() -> None:
    svg = charts.latency_vs_load([BASELINE, AFTER]) + stacked_bars("t", [("a", [("p", 1e-5)])], unit="s")
    assert not re.search(r">[^<]*\de[+-]?\d[^<]*<", svg)
    assert WIDTH == 560
