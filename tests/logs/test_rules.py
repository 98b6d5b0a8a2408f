"""Each rule on evidence built by hand (rules are pure functions), plus the evidence arithmetic."""

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from infradoctor.findings import Severity, catalog, run_rules
from infradoctor.logs.evidence import Incident, LogsEvidence, UpstreamStats, build_evidence, hist_quantile, hist_sample
from infradoctor.logs.incidents import LogsRuleOptions
from infradoctor.logs.stats import LogStats
from infradoctor.node.rules import n001_gpu_xid as _n001
from infradoctor.route.rules import r001_router_overhead as _r001
from infradoctor.route.rules import r002_backend_slow as _r002
from infradoctor.route.rules import r003_unhealthy_backend as _r003
from infradoctor.route.rules import r005_retry_amplification as _r005
from infradoctor.route.rules import r006_no_healthy_upstream as _r006
from infradoctor.route.rules import r007_upstream_connect_error as _r007
from infradoctor.route.rules import r008_upstream_timeout as _r008
from infradoctor.route.rules import r009_router_queueing as r009_router_queueing

OPTS = LogsRuleOptions()


def _logs(module: object) -> SimpleNamespace:
    """The module's check over logs evidence, as ``.check``, and its other names."""
    return SimpleNamespace(**{**vars(module), "check": getattr(module, "check_logs", getattr(module, "check", None))})


n001_gpu_xid = _logs(_n001)
r001_router_overhead = _logs(_r001)
r002_backend_slow = _logs(_r002)
r003_upstream_outlier = _logs(_r003)
r005_retries = _logs(_r005)
r006_no_healthy_upstream = _logs(_r006)
r007_upstream_connect_error = _logs(_r007)
r008_upstream_timeout = _logs(_r008)


def evidence(**overrides: object) -> LogsEvidence:
    base: dict[str, object] = {
        "files": ("x.log",), "lines": 1000, "requests": 1000, "request_errors": 0, "request_p50_ms": 100.0, "request_p99_ms": 200.0,
        "upstream_p50_ms": 95.0, "upstream_p99_ms": 190.0, "overhead_samples": 1000, "overhead_p50_ms": 2.0,
        "overhead_p99_ms": 5.0, "upstreams": (), "attempts": {}, "incidents": (), "incidents_dropped": 0, "signature_counts": {},
        "signature_durations": {}, "success_hist": {100: 990, 200: 10}, "queue_by_minute": (), "xids": {}, "exceptions": {},
    }
    base.update(overrides)
    return LogsEvidence(**base)  # type: ignore[arg-type]


def test_a_healthy_log_has_no_findings() -> None:
    assert run_rules(evidence()) == []


def test_every_code_logs_can_emit_has_a_check_over_logs() -> None:
    codes = {code for code, rule in catalog().items() if any(c.evidence is LogsEvidence for c in rule.checks)}
    assert codes == {"N001", "N006", "N009", "N011", "N012", "N014", "R001", "R002", "R003", "R005", "R006", "R007",
                     "R008", "R009", "R012", "S014"}
    assert all("logs" in catalog()[code].commands for code in codes)


@pytest.mark.parametrize("overhead_p99,request_p99,fires", [(150.0, 400.0, True), (150.0, 2000.0, False),
                                                            (50.0, 100.0, False)])
def test_r001_router_overhead(overhead_p99: float, request_p99: float, fires: bool) -> None:
    found = r001_router_overhead.check(evidence(overhead_p99_ms=overhead_p99, request_p99_ms=request_p99), OPTS)
    assert bool(found) is fires
    if fires:
        assert found[0].code == "R001" and found[0].evidence["added_p99_ms"] == overhead_p99


def test_r001_needs_enough_requests() -> None:
    ev = evidence(overhead_p99_ms=300.0, request_p99_ms=400.0, overhead_samples=5)
    assert r001_router_overhead.check(ev, OPTS) == []


def test_r002_backend_slow_uses_successful_requests() -> None:
    slow = evidence(success_hist={1500: 90, 2500: 10}, overhead_p99_ms=3.0)
    found = r002_backend_slow.check(slow, OPTS)
    assert found and found[0].code == "R002" and found[0].evidence["success_p99_ms"] == pytest.approx(2500)
    assert r002_backend_slow.check(evidence(success_hist={1500: 90, 2500: 10}, overhead_p99_ms=900.0), OPTS) == []


def upstream(name: str, attempts: int, errors: int, p99: float) -> UpstreamStats:
    return UpstreamStats(name, attempts, errors, p99 / 2, p99)


def test_r003_error_outlier() -> None:
    ups = (upstream("a:1", 100, 1, 200), upstream("b:1", 100, 0, 210), upstream("c:1", 100, 30, 205))
    found = r003_upstream_outlier.check(evidence(upstreams=ups), OPTS)
    assert [f.evidence["backend"] for f in found] == ["c:1"]
    assert found[0].evidence["error_rate"] == 0.3 and found[0].evidence["state"] == "failing"


def test_r003_latency_outlier_and_small_pools() -> None:
    ups = (upstream("a:1", 100, 0, 200), upstream("b:1", 100, 0, 210), upstream("c:1", 100, 0, 1900))
    found = r003_upstream_outlier.check(evidence(upstreams=ups), OPTS)
    assert [f.evidence["backend"] for f in found] == ["c:1"] and "p99" in found[0].title
    assert r003_upstream_outlier.check(evidence(upstreams=ups[2:]), OPTS) == []
    assert r003_upstream_outlier.check(evidence(upstreams=(upstream("a:1", 5, 5, 9000),) + ups[:1]), OPTS) == []


def test_r005_retries() -> None:
    found = r005_retries.check(evidence(attempts={1: 80, 2: 15, 3: 5}), OPTS)
    assert found and found[0].evidence["retry_share"] == 0.2 and found[0].evidence["extra_attempts"] == 25
    assert found[0].evidence["amplification"] == 1.25 and found[0].evidence["client_requests"] == 100
    assert r005_retries.check(evidence(attempts={1: 99, 2: 1}), OPTS) == []
    assert r005_retries.check(evidence(signature_counts={"retry_limit_exceeded": 2}), OPTS)


def incident(kind: str, subject: str, start: int, end: int, count: int) -> Incident:
    from infradoctor.logs.signatures import BY_ID

    return Incident(kind, BY_ID[kind].code, subject, start, end, count, ("example line",))


def test_signature_rules_summarise_incidents() -> None:
    incidents = (incident("upstream_connect_error", "10.0.0.2:80", 100, 160, 40),
                 incident("upstream_reset", "10.0.0.3:80", 500, 500, 2),
                 incident("no_healthy_upstream", "-", 900, 930, 7))
    ev = evidence(incidents=incidents, signature_counts={"upstream_connect_error": 40, "upstream_reset": 2,
                                                         "no_healthy_upstream": 7})
    r007 = r007_upstream_connect_error.check(ev, OPTS)
    assert len(r007) == 1 and r007[0].evidence["count"] == 42 and r007[0].evidence["incidents"] == 2
    assert r007[0].evidence["first"] == "1970-01-01T00:01:40Z" and r007[0].evidence["example"] == "example line"
    r006 = r006_no_healthy_upstream.check(ev, OPTS)
    assert r006[0].severity is Severity.CRITICAL and r006[0].evidence["count"] == 7


def test_r008_infers_the_router_timeout_from_clustered_durations() -> None:
    ev = evidence(incidents=(incident("upstream_timeout", "10.0.0.3:80", 10, 50, 20),),
                  signature_durations={"upstream_timeout": {1000: 12, 1001: 6, 1003: 2}},
                  success_hist={800: 50, 1200: 50})
    found = r008_upstream_timeout.check(ev, OPTS)
    assert found[0].evidence["inferred_timeout_ms"] == 1000.0
    assert "~1.00 s" in found[0].title and "1.00 s" in found[0].fix
    spread = evidence(incidents=ev.incidents, signature_durations={"upstream_timeout": {200: 5, 5000: 5, 30000: 5}})
    assert r008_upstream_timeout.check(spread, OPTS)[0].evidence["inferred_timeout_ms"] is None


def test_r009_growing_queue() -> None:
    minutes = tuple((m, 30, float(tw), tw * 2) for m, tw in enumerate([2, 3, 5, 40, 120, 300]))
    found = r009_router_queueing.check(evidence(queue_by_minute=minutes), OPTS)
    assert found and found[0].evidence["growing"] and found[0].evidence["queue_time_ms_max"] == 300
    flat = tuple((m, 30, 3.0, 9) for m in range(6))
    assert r009_router_queueing.check(evidence(queue_by_minute=flat), OPTS) == []


def test_n001_one_finding_per_xid_code_with_severity() -> None:
    stats = LogStats()
    stats.xids.update({(79, "PCI:0000:3b:00", 0): 1, (13, "PCI:0000:86:00", 0): 3, (13, "PCI:0000:87:00", 0): 1})
    found = n001_gpu_xid.check(build_evidence(stats, ("kern.log",)), OPTS)
    by_code = {f.evidence["xid"]: f for f in found}
    assert by_code[79].severity is Severity.CRITICAL and "reboot" in by_code[79].fix
    assert by_code[13].severity is Severity.MEDIUM and by_code[13].evidence["count"] == 4
    assert by_code[13].evidence["devices"] == ["PCI:0000:86:00", "PCI:0000:87:00"]


def test_histogram_quantiles_match_numpy() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        values = rng.integers(0, 500, size=int(rng.integers(1, 300)))
        hist = Counter(int(v) for v in values)
        for q in (0.0, 0.5, 0.9, 0.99, 1.0):
            assert hist_quantile(hist, q) == float(np.quantile(values, q, method="inverted_cdf"))  # nearest rank
    assert hist_quantile({}, 0.5) is None and hist_quantile({-1: 5}, 0.5) is None


def test_histogram_sample_is_bounded_and_deterministic() -> None:
    hist = dict.fromkeys(range(200), 100)
    sample = hist_sample(hist, 5000)
    assert len(sample) == 5000 and sample == hist_sample(hist, 5000)
    assert min(sample) == 0 and max(sample) == 199
    assert hist_sample({7: 3}) == [7.0, 7.0, 7.0]


def test_event_keys_stay_bounded(monkeypatch) -> None:
    from infradoctor.logs import stats as stats_module

    monkeypatch.setattr(stats_module, "MAX_EVENT_KEYS", 1000)
    stats = LogStats()
    for second in range(5000):
        stats.count_event("upstream_timeout", f"u:{second % 3}", 1_000_000 + second, 1)
    assert len(stats.events) <= 1000 and stats.event_resolution_s == 60
    assert sum(stats.events.values()) == 5000
    assert all(sec % 60 == 0 for _, _, sec, _, _ in stats.events)


def test_incident_windows_split_on_gaps() -> None:
    stats = LogStats()
    for second in (100, 101, 130, 400, 401):
        stats.add_event("upstream_timeout", "u:1", second, f"line {second}")
    ev = build_evidence(stats, ("x",))
    windows = sorted((i.start_s, i.end_s, i.count) for i in ev.incidents)
    assert windows == [(100, 130, 3), (400, 401, 2)]
    assert ev.incidents[0].examples == ("line 100", "line 101", "line 130")
