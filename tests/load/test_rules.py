"""Each load rule on hand-built evidence (recorded metrics), firing and not firing; the knee definition."""

from __future__ import annotations

from typing import Any

import pytest

from infradoctor.findings import catalog, run_rules
from infradoctor.load.evidence import LoadEvidence
from infradoctor.load.knee import CurvePoint, find_knee
from infradoctor.load.metrics import LatencySummary, PointMetrics, Window


def point(
    level: float,
    rps: float,
    p50: float,
    p99: float,
    *,
    mode: str = "closed",
    errors: dict | None = None,
    completed: int = 1000,
    saturated: bool = False,
    first: tuple = (),
    windows: tuple = (),
    p90: float | None = None,
) -> dict[str, Any]:
    """A ``metrics.points[]`` entry; ``rps`` is the rate of completed requests (successes and failures)."""
    errors = errors or {}
    failed = sum(errors.values())
    return PointMetrics(
        label=f"c={level:g}" if mode == "closed" else f"r={level:g}",
        mode=mode,  # type: ignore[arg-type]
        offered=level,
        completed=completed,
        ok=completed - failed,
        completed_rps=rps,
        throughput_rps=rps * (1 - failed / completed),
        error_rate=failed / completed,
        errors=errors,
        latency_ms=LatencySummary(count=completed - failed, p50=p50, p90=p90 if p90 is not None else p50 * 1.2,
                                  p99=p99, max=p99),
        saturated=saturated,
        saturation_reason="event-loop thread used 97% of a core" if saturated else None,
        client_cpu_fraction=0.97 if saturated else 0.2,
        first_latencies_ms=tuple(first),
        windows=tuple(Window(t_s=i, completed=1, errors=0, mean_ms=m, max_ms=m) for i, m in enumerate(windows)),
    ).to_dict()


def run(points: list[dict], mode: str = "closed", timeout_s: float = 30.0, slo: dict | None = None) -> dict[str, Any]:
    curve = [CurvePoint(p["offered"], p["throughput_rps"], p["latency_ms"]["p99"]) for p in points
             if not p["saturated"]]
    knee = find_knee(curve)
    metrics = {
        "mode": mode,
        "settings": {"url": "http://127.0.0.1:9/", "timeout_s": timeout_s},
        "points": points,
        "headline": {},
        "knee": knee.metrics("concurrency" if mode == "closed" else "rate").to_dict() if knee else None,
    }
    if slo is not None:
        metrics["slo"] = slo
    return {f.code: f for f in run_rules(LoadEvidence.from_metrics(metrics))}


HEALTHY = [point(1, 50, 20, 25), point(2, 99, 20, 26), point(4, 196, 20.5, 28), point(8, 380, 21, 30)]
BOUNDED = [point(1, 20, 50, 52), point(2, 40, 50, 53), point(4, 40, 100, 104), point(8, 40, 200, 206)]
SERIAL = [point(1, 50, 20, 22), point(2, 50, 40, 42), point(4, 50, 80, 84), point(8, 50, 160, 165)]


def test_healthy_service_has_no_findings() -> None:
    assert run(HEALTHY) == {}


def test_knee_definition() -> None:
    knee = find_knee([CurvePoint(p["offered"], p["throughput_rps"], p["latency_ms"]["p99"]) for p in BOUNDED])
    assert knee is not None and (knee.level, knee.next_level) == (2, 4)
    assert knee.throughput_gain == pytest.approx(0.0) and knee.latency_growth == pytest.approx(104 / 53 - 1)
    # gains of 10% or more are not a knee even when latency doubles
    assert find_knee([CurvePoint(1, 100, 10), CurvePoint(2, 110, 30)]) is None
    assert find_knee([CurvePoint(1, 100, 10), CurvePoint(2, 109, 30)]) is not None
    # flat throughput with flat latency (a generator limit, or noise) is not a knee
    assert find_knee([CurvePoint(1, 100, 10), CurvePoint(2, 101, 14)]) is None
    assert find_knee([CurvePoint(1, 100, 10)]) is None


def test_s008_and_s003_on_bounded_capacity() -> None:
    found = run(BOUNDED)
    assert set(found) == {"S003", "S008"}
    assert found["S008"].evidence["level"] == 2 and found["S008"].evidence["throughput_rps"] == 40
    assert found["S003"].evidence["latency_ratio"] == pytest.approx(4.0)


def test_s003_is_low_when_the_queue_hurts_nobody_and_high_when_it_does() -> None:
    """Closed-loop latency always grows with clients past saturation: low with the numbers; high only with
    timeouts, errors or a broken SLO past the knee."""
    low = run(BOUNDED)["S003"]
    assert low.severity.value == "low"
    assert "50 -> 200 ms" in low.title and "bounded number of clients" in low.title
    assert not {"slo_broken", "read_timeouts", "error_rate"} & set(low.evidence)
    timeouts = BOUNDED[:3] + [point(8, 40, 200, 300, errors={"read_timeout": 5})]
    high = run(timeouts)["S003"]
    assert high.severity.value == "high" and high.evidence["read_timeouts"] == 5 and "5 requests timed out" in high.title
    failing = BOUNDED[:3] + [point(8, 40, 200, 206, errors={"http_500": 40})]
    assert run(failing)["S003"].evidence["error_rate"] == pytest.approx(0.04)
    assert run(failing)["S003"].severity.value == "high"
    below_knee_errors = [point(1, 20, 50, 52, errors={"http_500": 40}), *BOUNDED[1:]]  # not past the knee
    assert run(below_knee_errors)["S003"].severity.value == "low"


def test_s003_high_when_past_the_knee_breaks_the_slo() -> None:
    slo = {"text": "p99<150ms", "percentile": 99.0, "max_ms": 150.0, "max_error_rate": 0.01,
           "max_rate_rps": None, "met": False}
    found = run(BOUNDED, slo=slo)["S003"]
    assert found.severity.value == "high"
    assert found.evidence["slo_broken"] == {"slo": "p99<150ms", "c=8": "p99 206 ms > 150 ms"}
    met = run(BOUNDED, slo={**slo, "text": "p99<1s", "max_ms": 1000.0})["S003"]
    assert met.severity.value == "low"
    unknown = run(BOUNDED, slo={**slo, "text": "p97<150ms", "percentile": 97.0})["S003"]
    assert unknown.severity.value == "low"  # no p97 stored: not claimed broken
    over = [point(20, 20, 50, 60, mode="open", windows=(50, 51)),
            point(80, 41, 900, 1900, mode="open", windows=(100, 600, 1400))]
    assert run(over, mode="open")["S003"].severity.value == "low"
    assert run(over, mode="open", slo={**slo, "text": "p99<1s", "max_ms": 1000.0})["S003"].severity.value == "high"


def test_s003_not_on_a_health_endpoint() -> None:
    """A /health-like endpoint: 0.18 ms at c=1, 9 ms at c=16 on a 2-core box shared with the client (measured)."""
    health = [point(1, 1318, 0.177, 7.9, p90=2.6), point(4, 1150, 0.64, 20.2, p90=9.5),
              point(16, 1180, 8.9, 30.0, p90=17.7)]
    found = run(health)
    assert "S008" in found and "S003" not in found
    # the same shape at service times of a few ms is judged (low: nobody timed out)
    model = [point(1, 600, 1.6, 7.9, p90=2.0), point(4, 626, 5.8, 11.8), point(16, 658, 23.4, 52.5)]
    assert run(model)["S003"].severity.value == "low"


def test_s003_not_when_the_service_sheds_load() -> None:
    shedding = [
        point(1, 20, 50, 52),
        point(2, 40, 50, 53),
        point(4, 40, 100, 104, errors={"http_503": 30}),
        point(8, 40, 200, 206, errors={"http_503": 300}),
    ]
    found = run(shedding)
    assert "S003" not in found and "S006" in found


def test_s003_open_loop_latency_grows_during_the_point() -> None:
    over = [
        point(20, 20, 50, 60, mode="open", windows=(50, 51)),
        point(80, 41, 900, 1900, mode="open", windows=(100, 600, 1400)),
    ]
    assert "S003" in run(over, mode="open")
    steady = [point(80, 41, 900, 1900, mode="open", windows=(900, 910, 905))]
    assert "S003" not in run(steady, mode="open")


def test_s001_serialized() -> None:
    found = run(SERIAL)
    assert "S001" in found
    assert found["S001"].evidence["throughput_scaling"] == pytest.approx(1.0)
    assert "S001" not in run(HEALTHY) and "S001" not in run(BOUNDED)
    sub_ms = [point(1, 30000, 0.03, 0.1), point(8, 29000, 0.25, 4.0)]
    assert "S001" not in run(sub_ms)  # client-bound at sub-millisecond latency
    # recorded from the demo's sick service on a loaded machine, 1.5 s points (~20 requests each): the first wave
    # of 8 requests (1..8 service times) holds the median at 3.9x, not 8x
    short = [point(1, 11.333, 83.6, 108.0, completed=18), point(2, 12.0, 163.9, 251.6, completed=20),
             point(4, 12.0, 325.5, 420.0, completed=22), point(8, 12.0, 328.1, 660.0, completed=26)]
    assert run(short)["S001"].evidence["latency_ratio"] == pytest.approx(3.924, abs=0.01)


def test_s001_is_medium_unless_users_pay_for_it() -> None:
    # serving one at a time is a capacity ceiling; it is high once the high point times out (or breaks an SLO)
    assert run(SERIAL)["S001"].severity.value == "medium"
    timing_out = [*SERIAL[:3], point(8, 50, 160, 165, errors={"read_timeout": 5}, completed=1000)]
    found = run(timing_out)["S001"]
    assert found.severity.value == "high" and "5 requests timed out" in found.title


def test_s001_serialized_behind_client_gaps() -> None:
    # a busy machine: at c=1 the generator waits ~12 ms for a core between a response and the next request, so
    # the serialized service (28 ms per request) shows 25 req/s at c=1 and its real 36 req/s only from c=2 on
    gaps = [point(1, 25.0, 28.0, 35.0, completed=40), point(2, 35.5, 56.0, 70.0, completed=53),
            point(4, 36.0, 110.0, 140.0, completed=54), point(8, 36.0, 215.0, 260.0, completed=58)]
    found = run(gaps)["S001"]
    assert found.evidence["throughput_scaling"] == pytest.approx(1.44)
    assert found.evidence["effective_parallelism"] == pytest.approx(1.01, abs=0.01)
    # two requests at a time is not serialized, even when CPU contention stretches each request (28 -> 38 ms)
    # and throughput grows less than 1.6x: the service holds 52 * 0.028 = 1.46 requests at once
    two = [point(1, 35.0, 28.0, 35.0), point(2, 50.0, 40.0, 60.0), point(4, 52.0, 77.0, 110.0),
           point(8, 52.0, 154.0, 220.0)]
    assert "S001" not in run(two)


def test_s005_cold_start() -> None:
    cold = [point(1, 50, 5, 8, first=(600, 5, 5, 6, 5), p90=6)]
    assert run(cold)["S005"].evidence["slowest_first_ms"] == 600
    tail = [point(1, 50, 5, 700, first=(600, 5, 5, 6, 5), p90=650)]  # slow requests are common: not cold start
    assert "S005" not in run(tail)
    assert "S005" not in run([point(1, 50, 5, 8, first=(30, 5, 5), p90=6)])


def test_s005_judges_only_the_first_contact() -> None:
    """A slow start at a point run after others (an --rate auto search bisecting downwards, a server that had
    answered this client already) is not a cold start; neither is one every new set of connections shows."""
    later = [point(4, 200, 5, 8, first=(5, 5, 6, 5, 5)), point(1, 50, 5, 8, first=(600, 5, 5, 6, 5), p90=6)]
    assert "S005" not in run(later)  # c=1 is the lowest level but ran second
    first = [point(1, 50, 5, 8, first=(600, 5, 5, 6, 5), p90=6), point(4, 200, 5, 8, first=(5, 5, 6, 5, 5))]
    assert run(first)["S005"].evidence["point"] == "c=1"
    every_point = [point(1, 50, 5, 8, first=(90, 5, 5, 6, 5), p90=6), point(4, 200, 5, 8, first=(95, 90, 6, 5, 5))]
    assert "S005" not in run(every_point)  # each point's new connections pay it: not a cold server
    saturated_first = [point(1, 50, 5, 8, first=(600, 5, 5), p90=6, saturated=True), point(2, 99, 5, 8)]
    assert "S005" not in run(saturated_first)


def test_s006_error_rate_threshold_and_severity() -> None:
    assert "S006" not in run([point(1, 50, 5, 8, errors={"http_503": 9})])
    medium = run([point(1, 50, 5, 8, errors={"http_503": 30, "reset": 5})])["S006"]
    assert medium.severity.value == "medium" and medium.evidence["errors"] == {"http_503": 30, "reset": 5}
    high = run([point(1, 50, 5, 8), point(4, 50, 5, 8, errors={"connect_refused": 400})])["S006"]
    assert high.severity.value == "high" and high.evidence["onset_level"] == 4


def test_s007_timeouts_below_the_knee_only() -> None:
    found = run([point(1, 50, 20, 300, errors={"read_timeout": 10})], timeout_s=0.3)
    assert found["S007"].evidence["read_timeouts"] == 10 and found["S007"].evidence["timeout_s"] == 0.3
    past_knee = BOUNDED[:3] + [point(8, 40, 200, 300, errors={"read_timeout": 20})]
    assert "S007" not in run(past_knee, timeout_s=0.3)


def test_s009_saturated_points_are_flagged_and_excluded() -> None:
    points = [point(1, 50, 20, 22), point(2, 99, 20, 23), point(4, 100, 40, 80, saturated=True)]
    found = run(points)
    assert set(found) == {"S009"}  # the saturated point would otherwise make a knee at 2
    assert found["S009"].evidence["points"] == ["c=4"]


def test_every_load_rule_documents_its_sections() -> None:
    for code in ("S001", "S003", "S005", "S006", "S007", "S008", "S009"):
        for section in ("What it detects", "Why it matters", "How it is measured", "Fix"):
            assert catalog()[code].sections().get(section), (code, section)


def test_knee_must_clear_the_p99_confidence_intervals() -> None:
    # p99 +60% with flat goodput, but the intervals overlap (a short, noisy point): not a knee
    noisy = [CurvePoint(1, 100, 10, 0.0, (6.0, 15.0)), CurvePoint(2, 101, 16, 0.0, (9.0, 30.0))]
    assert find_knee(noisy) is None
    clear = [CurvePoint(1, 100, 10, 0.0, (9.5, 10.6)), CurvePoint(2, 101, 16, 0.0, (15.0, 17.0))]
    knee = find_knee(clear)
    assert knee is not None and knee.level == 1
    out = knee.metrics("concurrency").to_dict()
    assert out["p99_ci_ms"] == [9.5, 10.6] and out["next"]["p99_ci_ms"] == [15.0, 17.0]
    assert "beyond both p99 95% intervals" in out["rule"]


def test_one_slow_request_in_a_short_point_does_not_move_the_knee() -> None:
    """Under ~800 requests a p99 interval's top is the point's slowest request: the knee rule goes without it."""
    from infradoctor.load.engine import PointResult
    from infradoctor.load.knee import find_knee
    from infradoctor.load.sweep import curve_point

    def closed(concurrency: int, n: int, latency_us: int, slowest_us: int | None = None) -> PointResult:
        point = PointResult(f"c={concurrency}", "closed", concurrency, None, None, timeout_s=5.0, duration_s=5.0)
        point.completed = point.ok = point.completed_in_window = point.ok_in_window = n
        for i in range(n):
            point.latency.record(slowest_us if (i == 0 and slowest_us) else latency_us + i % 50)
        return point

    # serialized: goodput flat at 100/s, latency doubling; the first point's first request took 2 s (cold start)
    short = [closed(1, 500, 10_000, 2_000_000), closed(2, 500, 20_000), closed(4, 500, 40_000)]
    assert all(curve_point(p).p99_ci_ms is None for p in short)
    knee = find_knee([curve_point(p) for p in short])
    assert knee is not None and knee.level == 1
    long = [closed(1, 2000, 10_000, 2_000_000), closed(2, 2000, 20_000), closed(4, 2000, 40_000)]
    curve = [curve_point(p) for p in long]
    assert all(c.p99_ci_ms is not None for c in curve) and curve[0].p99_ci_ms[1] < 20.0  # type: ignore[index]
    knee = find_knee(curve)
    assert knee is not None and knee.level == 1 and knee.p99_ci_ms is not None
