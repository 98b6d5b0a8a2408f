"""Each route rule on hand-built evidence: the case it must catch and the cases it must leave alone."""

from __future__ import annotations

import pytest

from infradoctor.findings import catalog, run_rules
from infradoctor.route.evidence import Retries, RouteEvidence
from infradoctor.route.rules import RuleOptions
from tests.route.builders import B1, B2, B3, BackendSpec, Scenario, evidence, healthy


def codes_of(ev, options: RuleOptions | None = None) -> list[str]:
    return sorted(f.code for f in run_rules(ev, options))


def by_code(ev, code: str, options: RuleOptions | None = None):
    return [f for f in run_rules(ev, options) if f.code == code]


def test_every_route_rule_module_declares_a_registered_code() -> None:
    seen = {code for code, rule in catalog().items() if any(c.evidence is RouteEvidence for c in rule.checks)}
    assert seen == {"R001", "R002", "R003", "R004", "R005", "R006", "R007", "R008", "R010", "R011", "S007"}


def test_healthy_pool_has_no_findings() -> None:
    ev = evidence(Scenario([BackendSpec(B1), BackendSpec(B2), BackendSpec(B3)]))
    assert codes_of(ev) == []


def test_r001_router_adds_latency() -> None:
    ev = evidence(Scenario([BackendSpec(B1), BackendSpec(B2)], router_ms=8.0))
    (f,) = by_code(ev, "R001")
    low, high = f.evidence["added_p50_ms_ci"]
    assert low < 8.0 < high + 0.5 and low <= f.evidence["added_p50_ms"] <= high
    assert f.severity.value == "high"
    assert "R002" not in codes_of(ev)


def test_r001_ignores_a_small_absolute_overhead() -> None:
    # 1 ms on a 2 ms backend is 50% but below MIN_ADDED_MS
    ev = evidence(Scenario([BackendSpec(B1, latency_ms=2.0, jitter_ms=0.2)], router_ms=1.0))
    assert by_code(ev, "R001") == []


def test_r002_slow_backends_behind_a_fast_router() -> None:
    specs = [BackendSpec(B1, latency_ms=400, jitter_ms=30), BackendSpec(B2, latency_ms=420, jitter_ms=30)]
    ev = evidence(Scenario(specs, router_ms=1.0))
    (f,) = by_code(ev, "R002")
    assert f.evidence["router_share_p50"] < 0.05
    assert "R001" not in codes_of(ev)
    assert by_code(ev, "R002", RuleOptions(slow_backend_ms=1000)) == []


def test_r003_names_the_failing_backend() -> None:
    specs = [BackendSpec(B1), BackendSpec(B2, error_rate=0.2), BackendSpec(B3)]
    (f,) = by_code(evidence(Scenario(specs)), "R003")
    assert f.evidence["backend"] == B2 and f.evidence["state"] == "failing" and B2 in f.title


def test_r003_down_backend() -> None:
    (f,) = by_code(evidence(Scenario([BackendSpec(B1), BackendSpec(B2, down=True)])), "R003")
    assert f.evidence["backend"] == B2 and f.evidence["state"] == "down"


def test_r003_slow_backend() -> None:
    specs = [BackendSpec(B1), BackendSpec(B2, latency_ms=40, jitter_ms=2), BackendSpec(B3)]
    (f,) = by_code(evidence(Scenario(specs)), "R003")
    assert f.evidence["backend"] == B2 and f.evidence["state"] == "slow" and f.evidence["slowdown"] > 3


def test_r003_does_not_fire_on_evenly_spread_errors() -> None:
    specs = [BackendSpec(B1, error_rate=0.1), BackendSpec(B2, error_rate=0.1)]
    assert by_code(evidence(Scenario(specs)), "R003") == []


def test_r004_uneven_unless_weights_expect_it() -> None:
    specs = [BackendSpec(B1, weight=3), BackendSpec(B2, weight=1)]
    (f,) = by_code(evidence(Scenario(specs, requests_per_path=400)), "R004")
    assert f.evidence["most_deviant"] in (B1, B2) and f.evidence["p_value"] < 0.001
    assert by_code(evidence(Scenario(specs, requests_per_path=400), weights=(3, 1)), "R004") == []


def test_r004_needs_a_header() -> None:
    specs = [BackendSpec(B1, weight=3), BackendSpec(B2, weight=1)]
    assert by_code(evidence(Scenario(specs, header=None)), "R004") == []


def test_r004_leaves_out_a_down_backend() -> None:
    ev = evidence(Scenario([BackendSpec(B1), BackendSpec(B2), BackendSpec(B3, down=True)]))
    assert by_code(ev, "R004") == []


def test_r005_from_upstream_lists_and_attempt_headers() -> None:
    specs = [BackendSpec(B1, error_rate=0.5, error="http_503"), BackendSpec(B2)]
    (f,) = by_code(evidence(Scenario(specs, retry_on_error=True)), "R005")
    assert f.evidence["counted_from"] == "upstream-list" and 1.15 < f.evidence["amplification"] < 1.4
    (g,) = by_code(evidence(Scenario(specs, retry_on_error=True, attempt_header=True)), "R005")
    assert g.evidence["counted_from"] == "attempt-header"


def test_r005_from_counters_and_not_below_threshold() -> None:
    from dataclasses import replace

    ev = evidence(Scenario([BackendSpec(B1)]))
    amplified = replace(ev, retries=Retries("backend-counters", client_requests=100, backend_attempts=160))
    (f,) = by_code(amplified, "R005")
    assert f.severity.value == "high"
    slight = replace(ev, retries=Retries("backend-counters", client_requests=100, backend_attempts=102))
    assert by_code(slight, "R005") == []


def test_r008_infers_the_router_timeout() -> None:
    specs = [BackendSpec(B1, latency_ms=300, jitter_ms=80)]
    (f,) = by_code(evidence(Scenario(specs, router_timeout_ms=250)), "R008")
    assert f.evidence["inferred_timeout_ms"] == pytest.approx(251, abs=2)
    assert f.evidence["timeout_below_backend_p99"] is True


def test_r008_needs_a_cluster() -> None:
    # 504s spread over a wide range of durations are not one timeout
    specs = [BackendSpec(B1, error_rate=0.2, error="http_504", latency_ms=200, jitter_ms=150)]
    ev = evidence(Scenario(specs))
    assert ev.timeout is None and by_code(ev, "R008") == []


def test_r010_healthy_endpoint_while_failing() -> None:
    specs = [BackendSpec(B1), BackendSpec(B2, error_rate=0.4)]
    health = {B1: healthy(B1), B2: healthy(B2)}
    (f,) = by_code(evidence(Scenario(specs, health=health)), "R010")
    assert f.evidence["backend"] == B2 and f.evidence["health_status"] == 200
    assert by_code(evidence(Scenario(specs)), "R010") == []  # no health audit, no verdict


def test_r011_cold_backend() -> None:
    specs = [BackendSpec(B1, cold_requests=5, cold_ms=200), BackendSpec(B2)]
    (f,) = by_code(evidence(Scenario(specs)), "R011")
    assert f.evidence["backend"] == B1 and f.evidence["ratio"] > 10


def test_rules_are_pure_and_deterministic() -> None:
    specs = [BackendSpec(B1, weight=3), BackendSpec(B2, error_rate=0.3)]
    ev = evidence(Scenario(specs, router_ms=6))
    assert [f.to_dict() for f in run_rules(ev)] == [f.to_dict() for f in run_rules(ev)]


def test_r006_all_backends_down() -> None:
    ev = evidence(Scenario([BackendSpec(B1, down=True), BackendSpec(B2, down=True)]))
    (f,) = by_code(ev, "R006")
    assert f.severity.value == "critical" and f.evidence["backends"] == {B1: "down", B2: "down"}
    assert by_code(evidence(Scenario([BackendSpec(B1), BackendSpec(B2, down=True)])), "R006") == []


def _probe(name: str, p50: float, failures: int = 0, attempts: int = 50):
    from infradoctor.route.evidence import ConnectProbe

    fail = {"connect_timeout": failures} if failures else {}
    return ConnectProbe(name, f"{name}:80", attempts, fail, p50, p50 * 2)


def test_r007_intermittent_connect_failures_and_slow_connects() -> None:
    from dataclasses import replace

    ev = evidence(Scenario([BackendSpec(B1), BackendSpec(B2)]))
    flaky = replace(ev, connect=(_probe("router", 0.1), _probe(B1, 0.1, failures=5), _probe(B2, 0.1)))
    (f,) = by_code(flaky, "R007")
    assert f.evidence["path"] == B1 and f.evidence["failure_rate"] == 0.1
    slow = replace(ev, connect=(_probe("router", 0.1), _probe(B1, 0.12), _probe(B2, 12.0)))
    (g,) = by_code(slow, "R007")
    assert g.evidence["path"] == B2 and g.severity.value == "medium"
    down = replace(ev, connect=(_probe("router", 0.1), _probe(B1, 0.1), ConnectProbe_down(B2)))
    assert by_code(down, "R007") == []  # all connects failing is "down" (R003), not intermittent
    # 8 of 50 connects completed only after a SYN retransmit (~1 s): reported as numbers, not an R007 failure
    retransmits = replace(_probe(B1, 0.1), syn_retransmits=8, syn_retransmit_ms=(1003.0,) * 8)
    assert by_code(replace(ev, connect=(_probe("router", 0.1), retransmits, _probe(B2, 0.1))), "R007") == []


def ConnectProbe_down(name: str):  # noqa: N802
    from infradoctor.route.evidence import ConnectProbe

    return ConnectProbe(name, f"{name}:80", 3, {"connect_refused": 3}, None, None)


def test_s007_client_timeout_cluster() -> None:
    from dataclasses import replace

    from infradoctor.route.evidence import TimeoutCluster

    ev = evidence(Scenario([BackendSpec(B1)]))
    cluster = TimeoutCluster(2000.0, 12, 12, {"read_timeout": 12}, 3.0, None, None)
    client = replace(ev, timeout=cluster, client_timeout_s=2.0)
    (f,) = by_code(client, "S007")
    assert f.evidence["timeout_s"] == 2.0 and by_code(client, "R008") == []
    router = replace(ev, timeout=replace(cluster, statuses={"http_504": 12}))
    assert by_code(router, "S007") == [] and len(by_code(router, "R008")) == 1


def test_r001_tail_only_when_the_whole_interval_clears_the_threshold() -> None:
    from dataclasses import replace

    from infradoctor.route.stats import Estimate

    ev = evidence(Scenario([BackendSpec(B1), BackendSpec(B2)], requests_per_path=300))
    att = ev.attribution
    assert by_code(ev, "R001") == []
    clear = replace(ev, attribution=replace(att, added_p99=Estimate(40.0, 25.0, 60.0)))
    (f,) = by_code(clear, "R001")
    assert f.severity.value == "medium" and "p99" in f.title
    noisy = replace(ev, attribution=replace(att, added_p99=Estimate(40.0, 2.0, 60.0)))
    assert by_code(noisy, "R001") == []


def test_r001_names_one_backend_whose_routed_path_is_slow() -> None:
    specs = [BackendSpec(B1), BackendSpec(B2), BackendSpec(B3, router_extra_ms=6.0)]
    ev = evidence(Scenario(specs, requests_per_path=300))
    (f,) = by_code(ev, "R001")
    assert f.evidence["backend"] == B3 and f.severity.value == "medium" and B3 in f.title
    assert f.evidence["added_p50_ms_ci"][0] > 3.0


def test_r001_allows_for_a_host_short_of_cpu() -> None:
    from dataclasses import replace

    ev = evidence(Scenario([BackendSpec(B1), BackendSpec(B2)], router_ms=5))
    (f,) = by_code(ev, "R001")
    added = f.evidence["added_p50_ms"]
    assert f.evidence["host_allowance_ms"] == 0.0
    # the prober woke late by half the added time on average: two wake-ups explain it, not the router
    starved = replace(ev, wakeup_delay_mean_ms=added / 2, wakeup_delay_p99_ms=added)
    assert by_code(starved, "R001") == []
    slightly = replace(ev, wakeup_delay_mean_ms=0.2, wakeup_delay_p99_ms=1.0)
    assert by_code(slightly, "R001") and by_code(slightly, "R001")[0].evidence["host_allowance_ms"] == 0.4


def _stats(kind: str, counters: dict[str, float], gauges: dict[str, float] | None = None,
           limits: dict[str, float] | None = None):
    from infradoctor.telemetry.evidence import GaugeSeries, RouterEvidence, RouterWindow

    window = RouterWindow(f"http://{kind}-admin", kind, f"{kind}-json", 3, 0, counters=counters,
                          gauges={k: GaugeSeries(v, v, v) for k, v in (gauges or {}).items()}, limits=limits or {})
    return RouterEvidence(window, client_requests=300)


def test_r001_judges_what_is_left_after_the_routers_retry_backoff_and_queue_wait() -> None:
    """A little retrying (8% of requests, on connection failures) no longer silences R001: Envoy's back-off time is
    taken out of the added p50 and the rest is judged; HAProxy's queue time likewise."""
    from dataclasses import replace

    from infradoctor.route.rules.r001_router_overhead import separable_ms

    ev = evidence(Scenario([BackendSpec(B1), BackendSpec(B2)], router_ms=25.0))
    retrying = {"requests": 324, "retries": 24, "retry_backoff": 24, "retry_success": 24, "connect_fail": 24}
    (f,) = by_code(replace(ev, router_stats=_stats("envoy", retrying)), "R001")
    assert f.evidence["subtracted_ms"] == {"retry_backoff": 12.5}  # one first retry's mean back-off (25 ms base)
    measured, left = f.evidence["measured_added_p50_ms"], f.evidence["added_p50_ms"]
    assert left == pytest.approx(measured - 12.5) and 10 < left < 15
    assert f.evidence["added_p50_ms_ci"][0] == pytest.approx(f.evidence["measured_added_p50_ms_ci"][0] - 12.5)
    assert "beyond its retry back-off (12.5 ms)" in f.title and f.severity.value == "high"
    # second retries wait longer: 6 of the 24 retries were a request's second (a mean of 37.5 ms), so a retried
    # request waited 25 ms on average, all of the added 25 ms
    twice = {**retrying, "retry_success": 18}
    assert separable_ms(_stats("envoy", twice)) == ({"retry_backoff": pytest.approx(25.0)}, None)
    assert by_code(replace(ev, router_stats=_stats("envoy", twice)), "R001") == []
    # the same retrying with less overhead than the back-off explains: nothing left to blame on the router
    small = evidence(Scenario([BackendSpec(B1), BackendSpec(B2)], router_ms=10.0))
    assert by_code(replace(small, router_stats=_stats("envoy", retrying)), "R001") == []
    # HAProxy's mean queue time of 4 ms: twice it is taken out
    queued = _stats("haproxy", {"requests": 300}, {"pending_active": 3.0, "queue_time_ms": 4.0})
    (h,) = by_code(replace(ev, router_stats=queued), "R001")
    assert h.evidence["subtracted_ms"] == {"queue_wait": 8.0} and "beyond its queue wait (8.0 ms)" in h.title


def test_r001_stays_silent_where_retry_or_queue_time_cannot_be_separated() -> None:
    from dataclasses import replace

    ev = evidence(Scenario([BackendSpec(B1), BackendSpec(B2)], router_ms=25.0))
    assert by_code(ev, "R001")  # the overhead alone is found
    cases = {
        # retried after 5xx: each failed attempt took a backend's time, which Envoy does not count
        "envoy 5xx retries": _stats("envoy", {"requests": 330, "retries": 30, "retry_backoff": 30,
                                              "retry_success": 30, "connect_fail": 0}),
        # retried after connect timeouts: each waited the connect timeout
        "envoy connect timeouts": _stats("envoy", {"requests": 330, "retries": 30, "retry_backoff": 30,
                                                   "retry_success": 30, "connect_fail": 30, "connect_timeout": 30}),
        # HAProxy's retries come with no time
        "haproxy retries": _stats("haproxy", {"requests": 330, "retries": 30}),
        # Envoy's pending queue reports no wait time
        "envoy queue": _stats("envoy", {"requests": 300, "pending_total": 60}, {"pending_active": 4.0}),
        "envoy overflow": _stats("envoy", {"requests": 300, "pending_overflow": 5}),
    }
    for name, stats in cases.items():
        assert by_code(replace(ev, router_stats=stats), "R001") == [], name
    # a little retrying below RETRY_SHARE subtracts nothing and silences nothing
    (f,) = by_code(replace(ev, router_stats=_stats("envoy", {"requests": 303, "retries": 3})), "R001")
    assert "subtracted_ms" not in f.evidence


def test_r001_is_silent_when_the_router_retried() -> None:
    ev = evidence(Scenario([BackendSpec(B1), BackendSpec(B2)], router_ms=5))
    retried = RouteEvidence(**{**ev.__dict__, "retries": Retries("upstream-list", 400, 520, 100)})
    assert "R001" not in codes_of(retried) and "R005" in codes_of(retried)


def test_r009_a_full_queue_held_its_limit_though_the_sampled_gauge_missed_it() -> None:
    """Envoy's pending gauge is read every few hundred ms; a queue of 2 fills and drains between reads, but each
    overflow proves the queue was full (CI saw 'up to 0 waiting' beside 120 refusals)."""
    refused = _stats("envoy", {"requests": 180, "pending_overflow": 120, "pending_total": 180},
                     {"pending_active": 0.0}, {"max_pending_requests": 2, "max_connections": 1})
    (f,) = by_code(refused, "R009")
    assert f.evidence["pending_max"] == 2 and f.evidence["rejected"] == 120
    assert "up to 2 waiting" in f.title and "(limit 2)" in f.title
    # no limit reported: at least one waited
    (g,) = by_code(_stats("envoy", {"requests": 180, "pending_overflow": 5}), "R009")
    assert g.evidence["pending_max"] == 1
    # new connections alone (pending_total without a queue seen or refused) are no queueing
    assert by_code(_stats("envoy", {"requests": 300, "pending_total": 40}), "R009") == []
