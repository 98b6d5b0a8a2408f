from __future__ import annotations

import pytest

from infradoctor.route.analysis import (
    BackendTarget,
    ProbeRun,
    address_of,
    analyze,
    cold_start,
    expected_shares,
    find_timeout_cluster,
    match_backend,
    parse_upstream_value,
    retries_from_counters,
    retries_from_headers,
)
from infradoctor.route.evidence import DIRECT, ROUTER, Sample
from tests.route.builders import B1, B2, BackendSpec, Scenario, evidence


def s(latency: float, error: str | None = None, *, kind: str = ROUTER, path: str = ROUTER, t: float = 0.0,
      status: int | None = 200, served_by: str | None = None, attempts: int | None = None) -> Sample:
    return Sample(path, kind, 0, t, latency, status, error, served_by, attempts)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://10.0.0.1:8000", "10.0.0.1:8000"),
        ("10.0.0.1:8000", "10.0.0.1:8000"),
        ("http://Backend.example", "backend.example:80"),
        ("https://backend.example/x", "backend.example:443"),
        ("[::1]:9000", "[::1]:9000"),
    ],
)
def test_address_of(text: str, expected: str) -> None:
    assert address_of(text) == expected


def test_nginx_upstream_lists() -> None:
    assert parse_upstream_value("10.0.0.1:8000, 10.0.0.2:8000") == ("10.0.0.2:8000", 2)
    assert parse_upstream_value("10.0.0.1:8000 : 10.0.0.2:8000") == ("10.0.0.2:8000", 2)
    assert parse_upstream_value("10.0.0.1:8000") == ("10.0.0.1:8000", 1)
    assert parse_upstream_value("") == ("", 0)


def test_match_backend_by_any_spelling() -> None:
    targets = [BackendTarget("http://localhost:8000", frozenset({"localhost:8000", "127.0.0.1:8000"}))]
    assert match_backend("127.0.0.1:8000", targets) == ("http://localhost:8000", "127.0.0.1:8000", 1)
    assert match_backend("http://localhost:8000", targets)[0] == "http://localhost:8000"
    assert match_backend("10.9.9.9:1", targets) == (None, "10.9.9.9:1", 1)
    assert match_backend(None, targets) == (None, None, 0)


def test_expected_shares() -> None:
    assert expected_shares(["a", "b"], None) == {"a": 0.5, "b": 0.5}
    assert expected_shares(["a", "b"], [3, 1]) == {"a": 0.75, "b": 0.25}


def test_timeout_cluster_found_among_other_errors() -> None:
    errors = [s(1500.0 + i * 0.7, "http_504", status=504) for i in range(10)]
    errors += [s(3.0, "http_502", status=502), s(800.0, "http_504", status=504)]
    cluster = find_timeout_cluster(errors, backend_p99_ms=2000.0)
    assert cluster is not None
    assert cluster.count == 10 and 1500 <= cluster.timeout_ms <= 1507
    assert cluster.statuses == {"http_504": 10}
    assert cluster.routed_errors == 12


def test_fast_failures_are_not_a_timeout() -> None:
    errors = [s(0.4, "http_504", status=504) for _ in range(10)]
    assert find_timeout_cluster(errors) is None
    assert find_timeout_cluster([s(300.0, "http_504", status=504)] * 2) is None


def test_cold_start_needs_enough_requests() -> None:
    first = [s(200.0, t=i) for i in range(5)]
    rest = [s(10.0, t=10 + i) for i in range(20)]
    cold = cold_start(rest + first)  # order comes from send time, not list order
    assert cold is not None and cold.first_p50_ms == 200.0 and cold.steady_p50_ms == 10.0
    assert cold_start(first + rest[:5]) is None


def test_retries_from_headers_and_counters() -> None:
    routed = [s(1.0, attempts=2), s(1.0, attempts=1), s(1.0, attempts=1)]
    r = retries_from_headers(routed, attempt_header_seen=True)
    assert r is not None and r.backend_attempts == 4 and r.retried_requests == 1 and r.source == "attempt-header"
    # single addresses from a backend-set header say nothing about retries
    assert retries_from_headers([s(1.0, attempts=1)] * 3, attempt_header_seen=False) is None
    direct = [s(1.0, kind=DIRECT, path=B1)] * 4 + [s(0.1, "connect_refused", kind=DIRECT, path=B2, status=None)]
    routed = [s(1.0)] * 10
    counted = retries_from_counters(routed, direct, {B1: 14, B2: 6})
    assert counted is not None and counted.backend_attempts == 16 and counted.client_requests == 10
    assert retries_from_counters(routed, direct, {B1: 14, B2: None}) is None


def test_analyze_attributes_and_summarises() -> None:
    ev = evidence(Scenario([BackendSpec(B1), BackendSpec(B2)], router_ms=3.0, requests_per_path=200))
    assert ev.router.requests == 200 and ev.router.ok == 200
    assert ev.distribution.attributed == 200 and ev.distribution.unattributed == 0
    assert sum(ev.distribution.counts.values()) == 200
    assert [b.direct.requests for b in ev.backends] == [200, 200]
    assert ev.attribution.added_p50.value == pytest.approx(3.0, abs=0.6)
    assert {b.backend for b in ev.attribution.per_backend} == {B1, B2}


def test_analyze_counts_unknown_upstreams() -> None:
    run = ProbeRun(samples=(s(1.0, served_by="10.9.9.9:80"), s(1.0, served_by="10.0.0.1:8000")), header="x-served-by")
    targets = [BackendTarget(B1, frozenset({"10.0.0.1:8000"}))]
    ev = analyze(run, router_url="http://lb/", targets=targets)
    assert ev.distribution.attributed == 1 and ev.distribution.unknown_addresses == {"10.9.9.9:80": 1}


def test_retried_attempts_count_against_the_backend_that_failed_them() -> None:
    run = ProbeRun(
        samples=(
            s(5.0, served_by="10.0.0.1:8000, 10.0.0.2:8000"),
            s(5.0, served_by="10.0.0.1:8000, 10.0.0.2:8000"),
            s(5.0, served_by="10.0.0.2:8000"),
        ),
        header="x-upstream-addr",
    )
    targets = [BackendTarget(B1, frozenset({"10.0.0.1:8000"})), BackendTarget(B2, frozenset({"10.0.0.2:8000"}))]
    ev = analyze(run, router_url="http://lb/", targets=targets)
    assert [b.failed_attempts for b in ev.backends] == [2, 0]
    assert [b.served for b in ev.backends] == [0, 3]


def test_cold_start_compares_each_path_with_its_own_steady_state() -> None:
    # routed requests are 20 ms slower than direct ones; the first (routed) requests are not cold for that
    first = [s(25.0, t=i) for i in range(5)]
    rest = [s(25.0, t=10 + i) for i in range(10)]
    rest += [s(5.0, kind=DIRECT, path=B1, t=20 + i) for i in range(15)]
    cold = cold_start(first + rest)
    assert cold is not None and cold.first_p50_ms == pytest.approx(5.0) and cold.steady_p50_ms == 5.0


def test_retried_requests_are_left_out_of_the_attribution() -> None:
    direct = tuple(s(5.0, kind=DIRECT, path=B1) for _ in range(30))
    first_try = tuple(s(5.5, served_by="10.0.0.1:8000", attempts=1) for _ in range(30))
    retried = tuple(s(50.0, served_by="10.0.0.2:8000, 10.0.0.1:8000", attempts=2) for _ in range(30))
    run = ProbeRun(samples=direct + first_try + retried, header="x-upstream-addr")
    targets = [BackendTarget(B1, frozenset({"10.0.0.1:8000"})), BackendTarget(B2, frozenset({"10.0.0.2:8000"}))]
    ev = analyze(run, router_url="http://lb/", targets=targets)
    assert ev.attribution.routed_n == 30 and ev.attribution.added_p50.value == pytest.approx(0.5)
    assert ev.router.requests == 60  # the path itself still counts every request


def test_router_host_names_map_to_backends_by_address() -> None:
    from pathlib import Path

    from infradoctor.route.analysis import BackendTarget, match_backend
    from infradoctor.route.telemetry import backend_aliases
    from infradoctor.telemetry.evidence import router_window
    from infradoctor.telemetry.router import parse_router_stats
    from infradoctor.telemetry.sampler import Reading

    corpus = Path(__file__).resolve().parents[1] / "corpus" / "metrics"
    snap = parse_router_stats((corpus / "envoy-1.40.0-clusters.json").read_bytes())
    window = router_window("admin", [Reading(0.0, 1.0, router=snap)])
    b0, b1 = (h.address for h in snap.hosts)
    targets = [BackendTarget(f"http://{b0}", frozenset({b0})), BackendTarget(f"http://{b1}", frozenset({b1}))]
    aliases = backend_aliases([window], targets)
    assert aliases["b0"] == f"http://{b0}" and aliases["b1"] == f"http://{b1}"
    assert match_backend("b1", targets, aliases) == (f"http://{b1}", "b1", 1)  # not a host "b1:80"
    assert match_backend("b1", targets)[0] is None
