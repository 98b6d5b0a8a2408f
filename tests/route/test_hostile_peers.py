"""Route's side probes and the statistics sampler against hostile peers: bounded in time, never a traceback."""

from __future__ import annotations

import time

import pytest

from infradoctor.procs import http_get
from infradoctor.route.network import check_health, parse_counter, read_counter
from infradoctor.telemetry.sampler import ROUTER, SERVER, Sampler, Target
from tests.route.hostile import hostile_peer


@pytest.mark.parametrize("mode", ["garbage", "many-headers"])
def test_http_get_reports_a_protocol_error(mode: str) -> None:
    with hostile_peer(mode) as url:
        answer = http_get(url + "/health", timeout=3.0, max_body=100)
    assert answer.status is None and answer.error
    assert "Exception" in answer.error or "Error" in answer.error or "Status" in answer.error, answer.error


def test_http_get_cuts_off_a_trickling_peer_at_its_deadline() -> None:
    with hostile_peer("trickle") as url:
        start = time.perf_counter()
        answer = http_get(url + "/health", timeout=1.0, max_body=100)
        elapsed = time.perf_counter() - start
    assert answer.status is None and answer.error == "timed out after 1 s"
    assert elapsed < 2.0  # the whole request, not each read: 40 bytes at 1 byte/s would take 40 s


def test_http_get_reads_at_most_max_body() -> None:
    with hostile_peer("huge") as url:
        answer = http_get(url + "/metrics", timeout=5.0, max_body=1000)
    assert answer.status == 200 and len(answer.body) == 1000 and answer.truncated


def test_health_probe_of_a_trickling_backend_is_bounded() -> None:
    with hostile_peer("trickle") as url:
        start = time.perf_counter()
        health = check_health(url, ("/health", "/healthz"), timeout_s=1.0)
        elapsed = time.perf_counter() - start
    assert not health.healthy and health.status is None and "timed out" in (health.error or "")
    assert elapsed < 2.5  # one path tried: nothing answering means the others will not either


@pytest.mark.parametrize("body", ["inf", "1e999", "-5", "nan", '{"requests": 1e999}', '{"requests": "inf"}',
                                  "x_requests_total 1e999", "9" * 400, "[" * 5000])
def test_counter_endpoint_answering_no_count(body: str) -> None:
    assert parse_counter(body.encode()) is None
    with hostile_peer("body:" + body) as url:
        assert read_counter(url, "/stats", timeout_s=2.0) is None


def test_counter_values_that_are_counts() -> None:
    assert parse_counter(b"42") == 42
    assert parse_counter(b'{"requests": 7}') == 7
    assert parse_counter(b"# TYPE a_requests_total counter\na_requests_total{x=\"1\"} 3\nb_requests_total 4\n") == 7


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["garbage", "many-headers", "trickle", "huge", "silent", "body:<html>hi</html>"])
def test_sampler_against_a_bad_stats_endpoint_is_bounded(mode: str) -> None:
    with hostile_peer(mode) as url:
        sampler = Sampler([Target(url + "/stats", ROUTER), Target(url + "/metrics", SERVER)], interval_s=0.2,
                          timeout_s=0.5)
        start = time.perf_counter()
        sampler.start(wait_first=True)
        time.sleep(0.5)
        readings = sampler.stop()
        elapsed = time.perf_counter() - start
    assert elapsed < 4.0, elapsed  # first reads, the run, the last reads: each bounded by its 0.5 s deadline
    for target in sampler.targets:
        got = readings[target.url]
        assert got and all(r.router is None and r.server is None for r in got), got[:2]
        assert all(r.error for r in got)


def test_sampler_against_nothing_listening() -> None:
    sampler = Sampler([Target("http://127.0.0.1:1/stats", ROUTER)], interval_s=0.1, timeout_s=0.5)
    sampler.start()
    time.sleep(0.3)
    readings = sampler.stop()[sampler.targets[0].url]
    assert readings and all("refused" in (r.error or "").lower() for r in readings)
