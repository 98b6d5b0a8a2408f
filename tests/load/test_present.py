"""What a load result shows: one value per metric everywhere, readable at 80 columns, words that fit the points."""

from __future__ import annotations

import math
import re

import pytest

from infradoctor.compare.analysis import compare_changes
from infradoctor.load.analysis import build_metrics
from infradoctor.load.metrics import LoadMetrics, LoadSettings, point_metrics
from infradoctor.load.point import PointResult
from infradoctor.load.sweep import SweepResult
from infradoctor.report.present.load import point_line, sections
from infradoctor.report.terminal import TerminalRenderer
from infradoctor.result import new_result
from infradoctor.stats import quantile


def closed(concurrency: int, latencies_us: list[int], *, errors: int = 0, duration_s: float = 2.0) -> PointResult:
    point = PointResult(f"c={concurrency}", "closed", concurrency, None, None, timeout_s=5.0, duration_s=duration_s)
    for value in latencies_us:
        point.latency.record(value)
    point.ok = point.ok_in_window = len(latencies_us)
    point.completed = point.completed_in_window = len(latencies_us) + errors
    point.status_counts = {200: len(latencies_us), **({503: errors} if errors else {})}
    if errors:
        point.errors = {"http_503": errors}
        for _ in range(errors):
            point.error_latency.record(300)
    point.client_cpu_fraction = 0.0053
    return point


def opened(rate: float, completed: int, latencies_us: list[int], duration_s: float = 2.0) -> PointResult:
    point = PointResult(f"r={rate:g}", "open", None, rate, "constant", timeout_s=5.0, duration_s=duration_s)
    for value in latencies_us:
        point.latency.record(value)
    point.latency_from_send = point.latency
    point.ok = point.ok_in_window = point.completed = point.completed_in_window = completed
    point.status_counts = {200: completed}
    return point


def result_of(sweep: SweepResult, label: str = "run"):  # type: ignore[no-untyped-def]
    metrics = build_metrics(sweep, LoadSettings(url="http://127.0.0.1:8000/predict", timeout_s=5.0))
    return new_result("load", started_at="2026-12-01T10:00:00Z", duration_s=9.0,
                      target={"url": "http://127.0.0.1:8000/predict"}, metrics=metrics.to_dict()).with_(label=label)


def spread(n: int, low: int, high: int, seed: int) -> list[int]:
    import random

    rng = random.Random(seed)
    return [rng.randint(low, high) for _ in range(n)]


@pytest.mark.parametrize("n", [40, 1_000, 12_000])  # the stored distribution keeps every value, or a sample
def test_one_p99_in_the_headline_the_table_the_line_and_the_comparison(n: int) -> None:
    """The reference point's p99 is one number wherever it is shown (the demo printed 604.3 in its headline and
    584.3 in its result line: the comparison read the stored sample, whose p99 was another value)."""
    sweep = SweepResult("closed", points=[closed(1, spread(n, 9_000, 11_000, 1)), closed(2, spread(n, 9_000, 30_000,
                                                                                              2))])
    before = result_of(sweep, "baseline")
    metrics = LoadMetrics.from_dict(before.metrics)
    ref = next(p for p in metrics.points if p.label == metrics.reference_point)
    p99 = ref.latency_ms.p99
    assert p99 is not None and metrics.headline.p99_ms == p99
    assert quantile(sorted(metrics.distributions["latency_ms"]), 0.99) == p99
    assert f"p99 {_shown(p99)} ms" in point_line(ref)
    rows = [t for s in sections(before) for t in s.tables if s.title == "Load points"][0].rows
    assert [r[4] for r in rows if r[0] == ref.label] == [p99]
    after = result_of(SweepResult("closed", points=[closed(1, spread(n, 4_000, 5_000, 3)),
                                                    closed(2, spread(n, 4_000, 6_000, 4))]), "after")
    row = next(r for r in compare_changes(before, after, resamples=50)
               if r.metric == "latency_ms" and r.statistic == "p99")
    assert row.before == p99


def _shown(value: float) -> str:
    from infradoctor.report.sections import format_value

    return format_value(value)


def test_the_points_table_reads_at_80_columns() -> None:
    """Key columns whole at 80 columns (no '1,2…'), no empty error-classes column, no exponent notation."""
    points = [closed(c, spread(3_000, 900 * c, 1_300 * c + 2_000_000 * (c == 128), c), errors=5 * (c > 8))
              for c in (1, 2, 4, 8, 16, 32, 64, 128)]
    for point in points:
        point.duration_s = 0.25  # 12,000 responses a second: wide numbers
    text = TerminalRenderer(width=80).render([result_of(SweepResult("closed", points=points))])
    table = text[text.index("Load points"):text.index("Capacity")]
    assert all(len(line) <= 80 for line in table.splitlines())
    assert "…" not in table
    assert not re.search(r"\de[+-]\d", text), re.findall(r"\S*\de[+-]\d\S*", text)
    assert "12,000" in table and "c=128" in table and "knee" not in table.split("\n")[2]
    clean = TerminalRenderer(width=80).render([result_of(SweepResult("closed", points=points[:3]))])
    assert "classes" not in clean and "Failures" not in clean  # no failures: no column, no table


def test_an_open_loop_that_fell_behind_does_not_say_throughput_kept_growing() -> None:
    sweep = SweepResult("open", points=[opened(50, 100, spread(100, 10_000, 12_000, 5)),
                                        opened(200, 160, spread(160, 200_000, 900_000, 6))])
    capacity = next(s for s in sections(result_of(sweep)) if s.title == "Capacity")
    text = " ".join(capacity.lines)
    assert "kept growing" not in text
    assert "did not keep up" in text and "80.0 of 200 req/s" in text


def test_no_knee_wording_follows_the_points() -> None:
    growing = SweepResult("closed", points=[closed(1, spread(200, 9_000, 11_000, 7), duration_s=2.0),
                                            closed(2, spread(400, 9_000, 11_000, 8), duration_s=2.0)])
    assert "kept growing" in " ".join(_capacity(growing))
    flat = SweepResult("closed", points=[closed(1, spread(400, 9_000, 11_000, 9)),
                                         closed(2, spread(400, 9_000, 12_000, 10))])
    assert "stopped growing" in " ".join(_capacity(flat))
    assert "too few levels" in " ".join(_capacity(SweepResult("closed", points=flat.points[:1])))


def _capacity(sweep: SweepResult) -> list[str]:
    return list(next(s for s in sections(result_of(sweep)) if s.title == "Capacity").lines)


def test_nothing_connected_has_no_latency_and_says_so() -> None:
    point = PointResult("c=1", "closed", 1, None, None, timeout_s=5.0, duration_s=0.5, completed=300,
                        errors={"connect_refused": 300}, unreachable=True, elapsed_s=0.5)
    for _ in range(300):
        point.error_latency.record(150)
    metrics = point_metrics(point)
    assert metrics.throughput_rps == 0 and metrics.latency_ms.count == 0 and metrics.latency_ms.p50 is None
    line = point_line(metrics)
    assert "p50 – ms" in line and "(n=0)" in line and "unreachable" in line
    sweep = SweepResult("closed", points=[point], stop_reason="unreachable")
    result = result_of(sweep)
    assert "p50_ms" not in result.metrics["headline"] and result.metrics["distributions"] == {}
    assert "nothing connected" in " ".join(_capacity(sweep))


def test_the_knee_prints_its_n_and_claims_noise_only_with_intervals() -> None:
    few = SweepResult("closed", points=[closed(1, [10_000] * 60), closed(2, [10_000] * 30 + [40_000] * 31)])
    line = _capacity(few)[0]
    assert "(n=60)" in line and "(n=61)" in line and "too few for 95% intervals" in line
    many = SweepResult("closed", points=[closed(1, spread(2000, 9_000, 10_000, 11)),
                                         closed(2, spread(2000, 20_000, 30_000, 12))])
    line = _capacity(many)[0]
    assert "(n=2000, 95% CI" in line and "beyond both p99 95% intervals" in line
    assert math.isfinite(LoadMetrics.from_dict(result_of(many).metrics).knee.p99_ms)  # type: ignore[union-attr]
