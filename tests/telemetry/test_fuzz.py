"""The statistics parsers on hostile input: no exception escapes, time linear in the input (seeded, bounded)."""

from __future__ import annotations

import time
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from infradoctor.telemetry import prometheus
from infradoctor.telemetry.router import parse_router_stats
from infradoctor.telemetry.server import parse_server_metrics

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "metrics"
SEEDS = [p.read_bytes()[:4000] for p in sorted(CORPUS.iterdir()) if p.suffix in (".prom", ".json", ".csv", ".txt")]

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@seed(19)
@FUZZ
@given(st.sampled_from(SEEDS), st.integers(0, 3999), st.binary(max_size=64), st.integers(0, 200))
def test_mutated_recordings_never_raise(base: bytes, at: int, insert: bytes, cut: int) -> None:
    body = base[:at] + insert + base[at + cut:]
    parse_router_stats(body, "fuzz")
    parse_server_metrics(body, "fuzz")


@seed(17)
@FUZZ
@given(st.text(max_size=400))
def test_any_text_never_raises(text: str) -> None:
    parse_router_stats(text)
    parse_server_metrics(text)
    prometheus.parse(text)


def test_pathological_lines_take_linear_time() -> None:
    for body in ('vllm:num_requests_waiting{' + 'a="' * 30_000 + '} 1\n',
                 '{"stats": [' + '{"name": "cluster.' + "x." * 20_000 + 'upstream_rq_retry", "value": 1}]}',
                 "# pxname,svname\n" + '"' * 100_000,
                 "Active connections: " + "9" * 100_000,
                 "a::b:1::c::" * 20_000,
                 "[" * 100_000):
        start = time.perf_counter()
        parse_router_stats(body)
        parse_server_metrics(body)
        assert time.perf_counter() - start < 2.0, body[:40]


def test_values_that_are_not_numbers() -> None:
    text = ('vllm:num_requests_waiting{model_name="m"} 1e999\nvllm:num_requests_running{model_name="m"} NaN\n'
            'vllm:kv_cache_usage_perc{model_name="m"} 0.5\nvllm:num_preemptions_total 99999999999999999999999999999'
            '999999999999999999999999999999999999999999999999999999999999999999\n')
    snap = parse_server_metrics(text)
    assert snap.values == {"kv_cache_usage": 0.5}
