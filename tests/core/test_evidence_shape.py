"""One code, one evidence shape: every check of a code that several checks emit gives the same evidence keys.

A code's shared keys are the bullets of its docstring's *Evidence* section (``Rule.evidence``). Each check runs here
over the hand-built evidence the domain's rule tests use, once per kind of finding it makes, and every finding must
carry those keys, with ``source`` saying where the evidence came from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from infradoctor.findings import EVIDENCE_SECTION, EVIDENCE_SOURCES, Finding, catalog
from infradoctor.load.evidence import LoadEvidence
from infradoctor.logs.evidence import LogsEvidence, build_evidence
from infradoctor.logs.stats import LogStats
from infradoctor.node.containers import ContainerEvidence, ContainerRestart, PodState
from infradoctor.node.evidence import (
    GpuExpectation,
    GpuSnapshot,
    MemoryEvidence,
    NodeEvidence,
    SocketEvidence,
)
from infradoctor.route.evidence import ConnectProbe, RouteEvidence, TimeoutCluster
from infradoctor.telemetry.evidence import RouterEvidence, RouterWindow
from infradoctor.telemetry.router import HostState
from tests.load.test_rules import point
from tests.logs.test_rules import evidence as logs
from tests.logs.test_rules import incident, upstream
from tests.node import builders as node
from tests.node.test_rules import kernel_with
from tests.route.builders import B1, B2, B3, BackendSpec, Scenario, healthy
from tests.route.builders import evidence as route
from tests.telemetry.test_evidence_and_rules import router_evidence

LEFT_OUT = {"N011": "its checks live in profile/rules, which another change reworks now"}
"""Codes with several checks whose shape is not unified yet, and why."""

TWO = [BackendSpec(B1), BackendSpec(B2)]


def _connects(ev: RouteEvidence, slow: bool) -> RouteEvidence:
    def probe(name: str, p50: float, failures: int = 0) -> ConnectProbe:
        return ConnectProbe(name, f"{name}:80", 50, {"connect_timeout": failures} if failures else {}, p50, p50 * 2)

    if slow:
        return replace(ev, connect=(probe("router", 0.1), probe(B1, 0.12), probe(B2, 12.0)))
    return replace(ev, connect=(probe("router", 0.1), probe(B1, 0.1, 5), probe(B2, 0.1)))


def _hosts(*hosts: HostState, **counters: float) -> RouterEvidence:
    window = RouterWindow("http://admin", "envoy", "envoy-json", 2, 0, counters=dict(counters), hosts=hosts,
                          host_changes=("b2: failing -> healthy at 3.1 s",))
    return RouterEvidence(window, client_requests=600, client_errors={"http_503": 30},
                          backend_names={"b1": B1, "b2": B2})


def _incidents(*kinds: str) -> LogsEvidence:
    found = tuple(incident(kind, "10.0.0.2:80", 100 + 60 * i, 160 + 60 * i, 12) for i, kind in enumerate(kinds))
    return logs(incidents=found, signature_counts=dict.fromkeys(kinds, 12),
                signature_durations={"upstream_timeout": {1000: 12}})


def _xids() -> LogsEvidence:
    stats = LogStats()
    stats.xids.update({(79, "PCI:0000:3b:00", 0): 1, (13, "PCI:0000:86:00", 0): 3})
    return build_evidence(stats, ("kern.log",))


def _load() -> LoadEvidence:
    metrics = {"mode": "closed", "settings": {"url": "http://127.0.0.1:9/", "timeout_s": 0.3}, "headline": {},
               "points": [point(1, 50, 20, 300, errors={"read_timeout": 10})], "knee": None}
    return LoadEvidence.from_metrics(metrics)


def _containers() -> ContainerEvidence:
    return ContainerEvidence("kube-state-metrics via http://prom:9090", 3600.0, (
        ContainerRestart("ml", "llm-0", "server", "node-1", 6.0, last_terminated_reason="OOMKilled", exit_code=137),
        ContainerRestart("ml", "llm-1", "server", "node-2", 0.0, waiting_reason="CrashLoopBackOff"),
    ), not_ready=(PodState("ml", "llm-2", "node-3"),))


CASES: dict[tuple[str, type], list[Callable[[], Any]]] = {
    ("R001", RouteEvidence): [lambda: route(Scenario(TWO, router_ms=8.0)),
                              lambda: route(Scenario([*TWO, BackendSpec(B3, router_extra_ms=6.0)]))],
    ("R001", LogsEvidence): [lambda: logs(overhead_p99_ms=150.0, request_p99_ms=400.0)],
    ("R002", RouteEvidence): [lambda: route(Scenario([BackendSpec(B1, latency_ms=400, jitter_ms=30),
                                                      BackendSpec(B2, latency_ms=420, jitter_ms=30)], router_ms=1.0))],
    ("R002", LogsEvidence): [lambda: logs(success_hist={1500: 90, 2500: 10}, overhead_p99_ms=3.0),
                             lambda: logs(success_hist={1500: 90, 2500: 10}, overhead_p99_ms=3.0,
                                          upstreams=(upstream("a:1", 100, 0, 200), upstream("b:1", 100, 0, 210),
                                                     upstream("c:1", 100, 0, 2500)))],
    ("R003", RouteEvidence): [lambda: route(Scenario([BackendSpec(B1), BackendSpec(B2, error_rate=0.2),
                                                      BackendSpec(B3)])),
                              lambda: route(Scenario([BackendSpec(B1), BackendSpec(B2, down=True)])),
                              lambda: route(Scenario([BackendSpec(B1), BackendSpec(B2, latency_ms=40, jitter_ms=2),
                                                      BackendSpec(B3)]))],
    ("R003", LogsEvidence): [lambda: logs(upstreams=(upstream("a:1", 100, 1, 200), upstream("b:1", 100, 0, 210),
                                                     upstream("c:1", 100, 30, 205))),
                             lambda: logs(upstreams=(upstream("a:1", 100, 0, 200), upstream("b:1", 100, 0, 210),
                                                     upstream("c:1", 100, 0, 1900)))],
    ("R003", RouterEvidence): [lambda: _hosts(HostState("default", "b1", "10.0.0.1:8000", "ejected"),
                                              HostState("default", "b2", "10.0.0.2:8000", "healthy",
                                                        counters={"rq_error": 40, "rq_total": 100}))],
    ("R005", RouteEvidence): [lambda: route(Scenario([BackendSpec(B1, error_rate=0.5, error="http_503"),
                                                      BackendSpec(B2)], retry_on_error=True))],
    ("R005", LogsEvidence): [lambda: logs(attempts={1: 80, 2: 15, 3: 5}),
                             lambda: logs(signature_counts={"retry_limit_exceeded": 2})],
    ("R005", RouterEvidence): [lambda: router_evidence(retries=390, retry_success=303, retry_backoff=390)],
    ("R006", RouteEvidence): [lambda: route(Scenario([BackendSpec(B1, down=True), BackendSpec(B2, down=True)]))],
    ("R006", LogsEvidence): [lambda: _incidents("no_healthy_upstream")],
    ("R007", RouteEvidence): [lambda: _connects(route(Scenario(TWO)), slow=False),
                              lambda: _connects(route(Scenario(TWO)), slow=True)],
    ("R007", LogsEvidence): [lambda: _incidents("upstream_connect_error", "upstream_reset")],
    ("R008", RouteEvidence): [lambda: route(Scenario([BackendSpec(B1, latency_ms=300, jitter_ms=80)],
                                                     router_timeout_ms=250))],
    ("R008", LogsEvidence): [lambda: _incidents("upstream_timeout")],
    ("R009", LogsEvidence): [lambda: logs(queue_by_minute=tuple((m, 30, float(tw), tw * 2) for m, tw in
                                                                enumerate([2, 3, 5, 40, 120, 300]))),
                             lambda: _incidents("upstream_overflow")],
    ("R009", RouterEvidence): [lambda: router_evidence(pending_overflow=229, pending_total=131)],
    ("R010", RouteEvidence): [lambda: route(Scenario([BackendSpec(B1), BackendSpec(B2, error_rate=0.4)],
                                                     health={B1: healthy(B1), B2: healthy(B2)}))],
    ("R010", RouterEvidence): [lambda: _hosts(HostState("default", "b1", "10.0.0.1:8000", "failing"), panic=40),
                               lambda: _hosts(HostState("default", "b2", "10.0.0.2:8000", "healthy",
                                                        counters={"rq_error": 40, "rq_total": 100}))],
    ("R011", RouteEvidence): [lambda: route(Scenario([BackendSpec(B1, cold_requests=5, cold_ms=200),
                                                      BackendSpec(B2)]))],
    ("R011", RouterEvidence): [lambda: _hosts(HostState("default", "b2", "10.0.0.2:8000", "healthy"))],
    ("S007", RouteEvidence): [lambda: replace(route(Scenario([BackendSpec(B1)])), client_timeout_s=2.0,
                                              timeout=TimeoutCluster(2000.0, 12, 12, {"read_timeout": 12}, 3.0,
                                                                     None, None))],
    ("S007", LoadEvidence): [_load],
    ("N001", NodeEvidence): [lambda: node.evidence(node.gpu(0, pci_bus_id="00000000:3B:00.0"), kernel=kernel_with(
        "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=123, name=python, GPU has fallen off the bus.",
        "[ 2.0] NVRM: Xid (PCI:0000:99:00): 13, pid=7, name=python, Graphics Exception"))],
    ("N001", LogsEvidence): [_xids],
    ("N006", NodeEvidence): [lambda: node.evidence(host=node.host(memory=MemoryEvidence(
        64 * node.GIB, 2 * node.GIB, 62 * node.GIB, 8 * node.GIB, 6 * node.GIB)))],
    ("N006", LogsEvidence): [lambda: _incidents("host_oom_kill")],
    ("N009", NodeEvidence): [lambda: node.evidence(host=node.host(sockets=SocketEvidence(
        {"TIME_WAIT": 20000}, 32768, 60999, 100)))],
    ("N009", LogsEvidence): [lambda: _incidents("socket_exhaustion")],
    ("N012", NodeEvidence): [lambda: node.evidence(
        gpu=GpuSnapshot("none", "NVML could not initialise: Driver Not Loaded", None, None, (), False),
        expectation=GpuExpectation("0,1", (), False, None)),
        lambda: node.evidence(node.gpu(0), node.gpu(2, name=None, unavailable={"device": "GPU is lost"}))],
    ("N012", LogsEvidence): [lambda: _incidents("gpu_init_failed")],
    ("N014", ContainerEvidence): [_containers],
    ("N014", LogsEvidence): [lambda: _incidents("crash_loop_backoff", "probe_failed")],
}


def several_checks() -> list[str]:
    return [code for code, rule in catalog().items() if len(rule.checks) > 1 and code not in LEFT_OUT]


def test_every_check_of_a_code_with_several_is_covered() -> None:
    assert set(LEFT_OUT) <= {code for code, rule in catalog().items() if len(rule.checks) > 1}
    needed = {(code, check.evidence) for code in several_checks() for check in catalog()[code].checks}
    assert needed == set(CASES)


@pytest.mark.parametrize("code", several_checks())
def test_the_evidence_keys_are_documented(code: str) -> None:
    rule = catalog()[code]
    assert EVIDENCE_SECTION in rule.sections(), f"{code} has no Evidence section"
    assert "source" in rule.evidence, code
    listed = rule.sections()[EVIDENCE_SECTION]
    assert all(f"`{key}`" in listed for key in rule.evidence)


def findings_of(code: str, evidence_type: type) -> list[Finding]:
    (check,) = [c for c in catalog()[code].checks if c.evidence is evidence_type]
    options = check.options() if check.options is not None else None
    out = []
    for build in CASES[(code, evidence_type)]:
        found = check.function(build(), options)
        assert found, f"{code} {evidence_type.__name__}: a case gives no finding"
        out.extend(found)
    return out


@pytest.mark.parametrize("code,evidence_type", sorted(CASES, key=lambda k: (k[0], k[1].__name__)),
                         ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_every_check_gives_the_shared_keys(code: str, evidence_type: type) -> None:
    shared = set(catalog()[code].evidence)
    for finding in findings_of(code, evidence_type):
        assert finding.code == code
        missing = shared - set(finding.evidence)
        assert not missing, (code, evidence_type.__name__, finding.title, sorted(missing))
        assert finding.evidence["source"] in EVIDENCE_SOURCES, finding.evidence["source"]


def test_one_source_per_kind_of_evidence() -> None:
    expected = {RouteEvidence: {"probe"}, LogsEvidence: {"logs"}, RouterEvidence: {"router-stats"},
                LoadEvidence: {"load"}, NodeEvidence: {"probe", "kernel-log"}, ContainerEvidence: {"prometheus"}}
    for code, evidence_type in CASES:
        sources = {f.evidence["source"] for f in findings_of(code, evidence_type)}
        assert sources <= expected[evidence_type], (code, evidence_type.__name__, sources)
