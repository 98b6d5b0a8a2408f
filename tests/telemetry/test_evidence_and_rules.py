"""Windows over readings (counters as growth, gauges as series) and the S010-S013 / router rules on hand-built
evidence."""

from __future__ import annotations

from infradoctor.findings import run_rules
from infradoctor.telemetry.evidence import (
    RouterEvidence,
    ServerEvidence,
    ServerPoint,
    ServerWindow,
    router_window,
    server_window,
)
from infradoctor.telemetry.router import HostState, RouterSnapshot
from infradoctor.telemetry.sampler import Reading
from infradoctor.telemetry.server import ServerSnapshot


def router_reading(at: float, hosts: tuple[HostState, ...] = (), **values: float) -> Reading:
    return Reading(at, 1.0, router=RouterSnapshot("envoy", "http://admin", values, {"max_pending_requests": 2},
                                                  hosts, "envoy-json"))


def server_reading(at: float, **values: float) -> Reading:
    return Reading(at, 1.0, server=ServerSnapshot("vllm", "http://vllm/metrics", values,
                                                  {k: f"vllm:{k}" for k in values}))


def test_counters_are_growth_between_the_readings_around_the_window() -> None:
    readings = [router_reading(0.0, retries=10, pending_active=0), router_reading(1.0, retries=15, pending_active=3),
                router_reading(2.0, retries=40, pending_active=1), router_reading(3.0, retries=41, pending_active=0)]
    whole = router_window("http://admin", readings)
    assert whole.counters["retries"] == 31
    assert whole.gauges["pending_active"].max == 3 and whole.gauges["pending_active"].last == 0
    part = router_window("http://admin", readings, 0.5, 2.0)  # bracketed by the readings at 0.0 and 2.0
    assert part.counters["retries"] == 30 and part.gauges["pending_active"].max == 3


def test_a_counter_that_went_backwards_is_left_out_and_said() -> None:
    readings = [router_reading(0.0, retries=100), router_reading(1.0, retries=3)]
    window = router_window("http://admin", readings)
    assert "retries" not in window.counters
    assert any("backwards" in p for p in window.problems)


def test_failed_reads_are_counted_and_nothing_read_is_unknown() -> None:
    readings = [Reading(0.0, 1.0, error="ConnectionRefusedError: refused"), Reading(1.0, 1.0, error="timed out")]
    window = router_window("http://admin", readings)
    assert window.kind == "unknown" and window.failed_reads == 2 and len(window.problems) == 2


def test_host_state_changes_and_worst_state() -> None:
    h = lambda state: (HostState("b1", "10.0.0.6:8000", "app", state, f"/{state}"),)  # noqa: E731
    readings = [router_reading(0.0, h("healthy")), router_reading(1.0, h("ejected")), router_reading(2.0, h("healthy"))]
    window = router_window("http://admin", readings)
    assert window.host_changes == ("b1: healthy -> ejected at 1.0 s", "b1: ejected -> healthy at 2.0 s")
    assert window.worst_states == {"app/b1": "ejected"}


def test_server_window_means_from_histogram_sums() -> None:
    readings = [server_reading(0.0, waiting=0, queue_time_s_sum=1.0, queue_time_s_count=10, preemptions=2),
                server_reading(1.0, waiting=12, kv_cache_usage=0.97, queue_time_s_sum=3.0, queue_time_s_count=20,
                               preemptions=9)]
    window = server_window("http://vllm/metrics", readings)
    assert window.queue_time_ms == 200.0  # 2 s over 10 requests
    assert window.preemptions == 7 and window.waiting_max == 12 and window.kv_cache_usage_max == 0.97


def point(label: str, concurrency: int, p99: float, **server: float) -> ServerPoint:
    window = ServerWindow("http://vllm/metrics", "vllm", 3, requests_finished=100, **server)  # type: ignore[arg-type]
    return ServerPoint(label, concurrency, None, 100, p99 / 2, None, p99, window)


def sweep() -> ServerEvidence:
    return ServerEvidence("http://vllm/metrics", "vllm", (
        point("c=1", 1, 80, waiting_max=0, running_max=1, kv_cache_usage_max=0.1, preemptions=0),
        point("c=8", 8, 120, waiting_max=0, running_max=8, kv_cache_usage_max=0.6, preemptions=0),
        point("c=16", 16, 900, waiting_max=12, running_max=10, kv_cache_usage_max=0.96, preemptions=0),
        point("c=32", 32, 2400, waiting_max=28, running_max=10, kv_cache_usage_max=0.99, preemptions=14),
    ))


def test_server_rules_name_the_cause_point_by_point() -> None:
    found = {f.code: f for f in run_rules(sweep())}
    assert set(found) == {"S010", "S011", "S012"}
    assert found["S010"].title == ("p99 TTFT rose from 80 to 900 ms when the waiting queue reached 12 and KV-cache "
                                   "usage reached 96% (concurrency 16); preemptions started at concurrency 32")
    assert found["S011"].evidence["point"] == "c=16"
    assert found["S012"].title.startswith("Preemptions started at concurrency 32 (14 there, 14 in all)")


def test_no_batching_under_concurrency() -> None:
    evidence = ServerEvidence("http://vllm/metrics", "vllm", (
        point("c=1", 1, 20, waiting_max=0, running_max=1),
        point("c=8", 8, 160, waiting_max=7, running_max=1),
    ))
    found = {f.code: f for f in run_rules(evidence)}
    assert "S013" in found and "up to 7 waited" in found["S013"].title
    assert "S010" in found  # the queue explains the 8x latency


def test_healthy_sweep_has_no_server_findings() -> None:
    evidence = ServerEvidence("http://vllm/metrics", "vllm", (
        point("c=1", 1, 20, waiting_max=0, running_max=1, kv_cache_usage_max=0.05, preemptions=0),
        point("c=8", 8, 24, waiting_max=0, running_max=8, kv_cache_usage_max=0.3, preemptions=0),
    ))
    assert run_rules(evidence) == []


def router_evidence(**counters: float) -> RouterEvidence:
    readings = [router_reading(0.0, **dict.fromkeys(counters, 0.0)), router_reading(1.0, **counters)]
    return RouterEvidence(router_window("http://admin", readings), client_requests=600)


def test_router_rules_from_counters() -> None:
    codes = {f.code: f for f in run_rules(router_evidence(retries=390, retry_success=303, retry_overflow=70,
                                                          retry_backoff=390))}
    assert set(codes) == {"R005"}
    assert codes["R005"].evidence["amplification"] == 1.65
    overflow = {f.code: f for f in run_rules(router_evidence(pending_overflow=229, pending_total=131))}
    assert set(overflow) == {"R009", "R013"}
    assert "max_pending_requests 2" in overflow["R013"].title
    assert overflow["R013"].evidence["cause"] == "pending_overflow"
    assert run_rules(router_evidence(retries=1, pending_total=0)) == []


def test_the_batchers_own_wait_with_nobody_waiting_is_not_queueing() -> None:
    """At c=1 the server's queue time (the batcher's wait) was 37 ms of an 85 ms p50 with an empty waiting queue:
    S010 fired there, titled "when the waiting queue reached 0". It belongs at the point where requests wait."""
    evidence = ServerEvidence("http://vllm/metrics", "vllm", (
        point("c=1", 1, 88, waiting_max=0, running_max=1, queue_time_ms=37.0),
        point("c=16", 16, 342, waiting_max=12, running_max=4, queue_time_ms=234.0),
    ))
    (s010,) = [f for f in run_rules(evidence) if f.code == "S010"]
    assert s010.evidence["point"] == "c=16" and "reached 12" in s010.title
