"""Fleet pieces on evidence built by hand: the window, the selector, the PromQL, the node view and the rules."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from infradoctor.findings import run_rules
from infradoctor.fleet import queries as q
from infradoctor.fleet.evidence import (
    Change,
    FleetEvidence,
    FleetGpu,
    FleetHost,
    ModelServer,
    Onset,
    OnsetEvidence,
    Stat,
    Window,
)
from infradoctor.fleet.node_view import gpu_device, node_evidence, node_findings
from infradoctor.fleet.prom import Credentials, CredentialsError, PrometheusClient
from infradoctor.fleet.window import WindowError, make_window, nice_step, parse_duration, parse_time, read_changes
from infradoctor.node.containers import ContainerEvidence, ContainerRestart
from infradoctor.node.rules._common import NodeOptions

NOW = 1_800_000_000.0
WINDOW = Window(NOW - 3600, NOW, 30.0)


def test_window_from_duration_and_times() -> None:
    w = make_window(NOW, window="2h")
    assert (w.start, w.end, w.step_s) == (NOW - 7200, NOW, 60.0)
    w = make_window(NOW, start="2027-01-15T08:00:00Z", end="2027-01-15T09:30:00+01:00")
    assert w.seconds == 1800 and w.step_s == 15.0
    assert parse_time("now-90m", NOW) == NOW - 5400
    assert parse_duration("1h30m") == 5400
    assert nice_step(86400) == 900  # a day in about 96 points
    for bad in ({"window": "1x"}, {"start": "yesterday"}, {"start": "now-1h", "end": "now-2h"},
                {"window": "40d"}, {"window": "1h", "start": "now-1h"}, {"window": "1d", "step": "1s"}):
        with pytest.raises(WindowError):
            make_window(NOW, **bad)


def test_changes_file_text_and_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "changes.txt"
    path.write_text("# deploys\n2027-01-15T08:10:00Z deploy vllm 0.6.3\n"
                    '{"at": "2027-01-15T08:05:00Z", "description": "raise max_num_seqs", "node": "gpu-3"}\n'
                    "1768464000 drain rack 7\nnot-a-time oops\n", encoding="utf-8")
    changes, bad = read_changes(str(path), NOW)
    assert [c.description for c in changes] == ["drain rack 7", "raise max_num_seqs", "deploy vllm 0.6.3"]
    assert changes[1].node == "gpu-3"
    assert len(bad) == 1 and ":5:" in bad[0]


@pytest.mark.parametrize("selector", ['{cluster="a"}', '{cluster="a",env=~"prod.*",}', "{}", '{ job != "x\\"y" }'])
def test_selector_accepts_label_matchers(selector: str) -> None:
    inner = q.selector_matchers(selector)
    assert "{" not in inner or selector == "{}"


@pytest.mark.parametrize("selector", ['cluster="a"', '{cluster="a"} or vector(1)', '{cluster=a}', '{a="b"}}',
                                      '{a="b",} + {c="d"}', "{" + 'a="b",' * 400 + "}"])
def test_selector_refuses_anything_but_matchers(selector: str) -> None:
    with pytest.raises(q.SelectorError):
        q.selector_matchers(selector)


def test_queries_are_aggregated_and_carry_the_selector() -> None:
    scope = q.Scope('cluster="a"', "3600s", "30s")
    temp = next(s for s in q.GPU_SIGNALS if s.name == "temp_c")
    text = q.gauge_query(scope, temp, f"{q.NODE}, gpu")
    assert text.count("max by (fleet_node, gpu)") == len(temp.stats)
    assert 'cluster="a"' in text and "UUID" not in text
    assert "Hostname" in q.Scope("", "60s", "15s", "hostname").keyed("x")
    assert "hostname" in q.Scope("", "60s", "15s", "Hostname").keyed("x")
    assert q.instance_regex(["node-1"]) == "node\\\\-1(?::[0-9]+)?"


def test_credentials_from_environment_and_files_never_in_repr(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cr3t-token-value\n", encoding="utf-8")
    creds = Credentials.load(bearer_token_file=str(token), environ={})
    assert creds.header() == "Bearer s3cr3t-token-value"
    assert "s3cr3t" not in repr(creds) and "s3cr3t" not in creds.source
    basic = Credentials.load(environ={"INFRADOCTOR_PROMETHEUS_USER": "u", "INFRADOCTOR_PROMETHEUS_PASSWORD": "p"})
    assert basic.kind == "basic" and basic.header() == "Basic dTpw"
    assert Credentials.load(environ={}).header() is None
    bad = tmp_path / "basic"
    bad.write_text("no-colon\n", encoding="utf-8")
    with pytest.raises(CredentialsError, match="user:password"):
        Credentials.load(basic_auth_file=str(bad), environ={})
    with pytest.raises(ValueError, match="not in the URL"):
        PrometheusClient("http://user:pw@127.0.0.1:9090")


def _gpu(node: str, gpu: int, **signals: Stat) -> FleetGpu:
    return FleetGpu(node=node, gpu=str(gpu), uuid=f"GPU-{node}-{gpu}", model="NVIDIA H100 80GB HBM3",
                    signals=signals, throttled_share=0.0)


def _healthy(rng: random.Random) -> dict[str, Stat]:
    return {"util_pct": Stat(last=90, mean=90 + rng.uniform(-3, 3), min=80, max=99),
            "sm_clock_mhz": Stat(last=1980, mean=1980 - rng.uniform(0, 20), min=1900, max=1980),
            "power_w": Stat(last=650, mean=650 + rng.uniform(-15, 15), max=700),
            "temp_c": Stat(last=65, mean=65 + rng.uniform(-3, 3), max=70),
            "fb_used_mib": Stat(last=60000, max=61000), "fb_free_mib": Stat(last=20000, min=19000),
            "xid": Stat(last=0, min=0, max=0)}


def test_absent_ecc_is_not_collected_not_healthy() -> None:
    device = gpu_device(_gpu("n1", 0, **_healthy(random.Random(1))), 0)
    assert device.ecc.volatile_uncorrected is None
    assert "ecc" in device.unavailable and "not collected" in device.unavailable["ecc"]
    assert "xid" not in device.unavailable


def test_node_rules_judge_fleet_evidence_and_name_the_node() -> None:
    rng = random.Random(3)
    sick = _healthy(rng)
    sick["xid"] = Stat(last=79, min=0, max=79)
    sick["fb_used_mib"] = Stat(last=80000, max=80500)
    sick["fb_free_mib"] = Stat(last=500, min=100)
    sick["clock_reasons"] = Stat(last=0x40)
    gpus = [_gpu("gpu-7", 0, **_healthy(rng)), FleetGpu("gpu-7", "1", "GPU-x", "NVIDIA H100 80GB HBM3",
                                                        signals=sick, throttled_share=0.5)]
    host = FleetHost("gpu-7", {"mem_total_bytes": Stat(last=100e9), "mem_available_bytes": Stat(last=50e9, min=2e9),
                               "cpu_util_pct": Stat(mean=20.0), "cpu_cores": Stat(last=64)})
    evidence = node_evidence("gpu-7", gpus, host, window_s=3600, steps=120, source="test")
    found = {f.code: f for f in node_findings("gpu-7", evidence, NodeOptions())}
    assert set(found) == {"N001", "N003", "N004", "N006"}
    assert found["N001"].title.startswith("gpu-7: Xid 79") and "GPU 1" in found["N001"].title
    assert found["N004"].location is not None and found["N004"].location.file == "gpu-7 GPU 1"
    assert all(f.evidence["node"] == "gpu-7" for f in found.values())


def test_throttled_share_alone_reaches_n003_through_the_watch_summary() -> None:
    stats = _healthy(random.Random(4))
    stats["clock_reasons"] = Stat(last=0)  # clean at the end of the window
    gpu = FleetGpu("n2", "3", None, "T4", signals=stats, throttled_share=0.25)
    codes = [f.code for f in node_findings("n2", node_evidence("n2", [gpu], None, window_s=3600, steps=120,
                                                                  source="t"), NodeOptions())]
    assert codes == ["N003"]


def test_straggler_against_its_peers() -> None:
    rng = random.Random(11)
    gpus = [_gpu(f"n{i}", g, **_healthy(rng)) for i in range(4) for g in range(8)]
    slow = _healthy(rng)
    slow["sm_clock_mhz"] = Stat(last=1300, mean=1310)
    slow["power_w"] = Stat(last=420, mean=430)
    gpus[13] = FleetGpu(gpus[13].node, gpus[13].gpu, "GPU-slow", gpus[13].model, signals=slow, throttled_share=0.0)
    findings = run_rules(FleetEvidence(window=WINDOW, gpus=tuple(gpus)), NodeOptions())
    assert [(f.code, f.evidence["node"], f.evidence["gpu"]) for f in findings] == [("N013", "n1", "5")]
    dev = findings[0].evidence["deviations"][0]
    assert dev["signal"] == "sm_clock_mhz" and dev["peers"] == 32 and dev["peer_median"] > 1900
    assert findings[0].severity.value == "high"  # 34% below its peers' clock


def test_no_straggler_in_a_uniform_or_small_or_idle_group() -> None:
    rng = random.Random(5)
    assert run_rules(FleetEvidence(window=WINDOW, gpus=tuple(_gpu(f"n{i}", 0, **_healthy(rng))
                                                            for i in range(16))), NodeOptions()) == []
    few = [_gpu("a", 0, **_healthy(rng)), _gpu("b", 0, sm_clock_mhz=Stat(mean=900), util_pct=Stat(mean=90))]
    assert run_rules(FleetEvidence(window=WINDOW, gpus=tuple(few)), NodeOptions()) == []
    idle = [_gpu(f"n{i}", 0, util_pct=Stat(mean=1.0), sm_clock_mhz=Stat(mean=1980 if i else 300)) for i in range(8)]
    assert run_rules(FleetEvidence(window=WINDOW, gpus=tuple(idle)), NodeOptions()) == []


def test_slow_model_server_among_its_peers() -> None:
    servers = tuple(ModelServer(f"n{i}", "vllm", "llama", e2e_p50_s=0.80 + 0.01 * i) for i in range(6))
    servers += (ModelServer("n9", "vllm", "llama", e2e_p50_s=2.4),)
    found = run_rules(FleetEvidence(window=WINDOW, servers=servers), NodeOptions())
    assert [(f.code, f.evidence["node"]) for f in found] == [("N013", "n9")]


def test_container_restarts_by_node() -> None:
    evidence = ContainerEvidence("ksm", 3600, (
        ContainerRestart("serving", "vllm-0", "server", "gpu-1", 3, "OOMKilled", None, 137),
        ContainerRestart("serving", "vllm-1", "server", "gpu-2", 0, None, "CrashLoopBackOff"),
        ContainerRestart("batch", "job-1", "main", "gpu-2", 1, "Completed"),
        ContainerRestart("serving", "vllm-2", "server", "gpu-3", 0, "Error", "ContainerCreating"),
    ))
    found = run_rules(evidence, NodeOptions())
    assert [(f.evidence["node"], f.severity.value) for f in found] == [("gpu-1", "high"), ("gpu-2", "high")]
    assert found[0].evidence["oom_killed"] == ["serving/vllm-0/server"]
    assert found[1].evidence["crash_looping"] == ["serving/vllm-1/server"]


def test_pods_not_ready_and_gpu_pods_pending() -> None:
    from infradoctor.node.containers import PodState

    evidence = ContainerEvidence(
        "ksm", 3600,
        (ContainerRestart("serving", "vllm-0", "server", "gpu-1", 2, None, None),),
        not_ready=(PodState("serving", "vllm-0", "gpu-1"), PodState("serving", "vllm-3", "gpu-4"),
                   PodState("serving", "tgi-0", None)),
        pending_gpu_pods=(PodState("serving", "vllm-5", None, 4.0), PodState("train", "job-7", None, 8.0)))
    found = run_rules(evidence, NodeOptions())
    restarts = {f.evidence["node"]: f for f in found if f.code == "N014"}
    assert {n: (f.severity.value, f.evidence["not_ready"]) for n, f in restarts.items()} == {
        "(node unknown)": ("low", ["serving/tgi-0"]), "gpu-1": ("medium", ["serving/vllm-0"]),
        "gpu-4": ("low", ["serving/vllm-3"])}
    assert restarts["gpu-1"].title.startswith("gpu-1: 1 container restarted 2 times, 1 pod not ready")
    assert restarts["gpu-4"].title == "gpu-4: 1 pod not ready (serving/vllm-3 not ready)"
    pending = [f for f in found if f.code == "N016"]
    assert len(pending) == 1 and pending[0].severity.value == "high"  # 12 GPUs: more than a node's worth
    assert pending[0].evidence["gpus_requested"] == 12 and pending[0].evidence["pending_pods"] == 2
    assert pending[0].evidence["pods"] == ["serving/vllm-5 (4 GPU)", "train/job-7 (8 GPU)"]
    few = run_rules(ContainerEvidence("ksm", 3600, (), pending_gpu_pods=(PodState("a", "p", None, 1.0),)),
                    NodeOptions())
    assert [(f.code, f.severity.value) for f in few] == [("N016", "medium")]
    assert run_rules(ContainerEvidence("ksm", 3600, ()), NodeOptions()) == []


def test_pod_states_count_only_when_they_last() -> None:
    queries = q.kube_queries(q.Scope("", "3600s", "30s"))
    assert "== 1)[3600s:30s])) * 30 >= 300" in queries["not_ready"]  # steps not ready x step
    assert "[3600s:30s])) * 30 >= 300" in queries["pending_gpu"] and 'phase="Pending"' in queries["pending_gpu"]
    assert "* 30 >= 300" in queries["pod_node"]  # the nodes of pods not ready are looked up too
    assert "[120s:1s])) * 1 >= 60" in q.kube_queries(q.Scope("", "120s", "1s"))["not_ready"]  # half a short window


def test_onset_names_the_first_problem_and_the_change_before_it() -> None:
    onsets = (Onset("N006", "n3", "mem_available_fraction", NOW - 600, False, 0.1, "n3: memory"),
              Onset("N003", "n1 GPU 2", "fault_throttle_bits", NOW - 1800, False, 0.0, "n1: throttled"),
              Onset("N001", "n2 GPU 0", "xid", None, False, 0.0, "n2: xid"))
    changes = (Change(NOW - 7200, "old deploy"), Change(NOW - 2000, "deploy vllm 0.6.3"), Change(NOW - 60, "later"))
    found = run_rules(OnsetEvidence(WINDOW, onsets, changes), NodeOptions())
    assert len(found) == 1 and found[0].code == "N015" and found[0].severity.value == "high"
    assert found[0].evidence["entity"] == "n1 GPU 2"
    assert found[0].evidence["preceding_change"]["description"] == "deploy vllm 0.6.3"
    assert "3 min after change" in found[0].title
    before = (Onset("N003", "n1 GPU 2", "fault_throttle_bits", NOW - 3600, True, 0.0, "t"),)
    quiet = run_rules(OnsetEvidence(WINDOW, before, changes), NodeOptions())
    assert quiet[0].severity.value == "info" and "before the window" in quiet[0].title


@pytest.mark.parametrize(("junk", "kind"), [
    (b"not json at all", "bad-response"),
    (b"[" * 200_000, "bad-response"),
    (b'{"status": "success", "data": {"resultType": "string", "result": [1, "x"]}}', "bad-response"),
    (b'{"status": "error", "errorType": "execution", "error": "query timed out in expression evaluation"}',
     "prometheus"),
    (b'{"status": "success", "data": {"resultType": "vector", "result": []}}' + b" " * 5000, "too-large"),
])
def test_hostile_answers_are_failures_not_crashes(junk: bytes, kind: str) -> None:
    from infradoctor.procs import free_port
    from tests.fleet.faults import Faults, fault_proxy

    with fault_proxy(f"http://127.0.0.1:{free_port()}", Faults(junk=junk)) as url:
        limit = 4096 if kind == "too-large" else 1_000_000
        answer = PrometheusClient(url, timeout_s=5, max_response_bytes=limit).query("up", NOW)
    assert answer.failure is not None and answer.failure.kind == kind
    assert answer.series == ()


def test_odd_values_are_dropped_one_by_one() -> None:
    from infradoctor.procs import free_port
    from tests.fleet.faults import Faults, fault_proxy

    body = (b'{"status": "success", "data": {"resultType": "vector", "result": ['
            b'{"metric": {"gpu": "0"}, "value": [1800000000, "1e999"]},'
            b'{"metric": {"gpu": "1"}, "value": [1800000000, "NaN"]},'
            b'{"metric": {"gpu": "2"}, "value": [1800000000, "' + b"9" * 100 + b'"]},'
            b'{"metric": {"gpu": "3"}, "value": ["1800000000", "5"]},'
            b'{"metric": "x", "value": [1800000000, "6"]},'
            b'{"metric": {"gpu": "5"}, "value": [1800000000, "72.5"]}]}}')
    with fault_proxy(f"http://127.0.0.1:{free_port()}", Faults(junk=body)) as url:
        answer = PrometheusClient(url, timeout_s=5).query("up", NOW)
    assert answer.ok
    assert [(s.labels.get("gpu"), s.last) for s in answer.series] == [
        ("0", None), ("1", None), ("2", None), ("3", None), (None, 6.0), ("5", 72.5)]


def test_routers_and_model_servers_go_through_their_own_rules() -> None:
    from infradoctor.fleet.evidence import RouterUpstream
    from infradoctor.fleet.service_view import service_findings

    routers = [RouterUpstream("edge-1", "envoy", "models", requests=1200, retries=300, pending_max=0),
               RouterUpstream("edge-1", "envoy", "embed", requests=800, retries=0, pending_max=0),
               RouterUpstream("edge-2", "envoy", "models", requests=2000, retries=2, pending_max=0)]
    servers = [ModelServer("gpu-1", "vllm", "llama", queue_max=40, queue_mean=12, kv_cache_max=0.99, preemptions=25),
               ModelServer("gpu-2", "vllm", "llama", queue_max=0, queue_mean=0, kv_cache_max=0.4, preemptions=0)]
    found = {(f.code, f.location.file if f.location else "") for f in service_findings(routers, servers, 120)}
    assert found == {("R005", "edge-1 envoy"), ("S010", "gpu-1 vllm llama"), ("S011", "gpu-1 vllm llama"),
                     ("S012", "gpu-1 vllm llama")}


def test_upstream_health_from_membership_panic_and_server_states() -> None:
    """R003, R010 (panic) and R013 from what Prometheus holds of a router's upstream health (issue 20's routers)."""
    from infradoctor.fleet.evidence import RouterServer, RouterUpstream
    from infradoctor.fleet.service_view import service_findings

    routers = [
        # every host failing Envoy's active health check: Envoy routes to them anyway (panic)
        RouterUpstream("edge-1", "envoy", "models", requests=600, retries=0, pending_max=0, healthy_min=0,
                       members_max=2, panic=600, none_healthy=0),
        # panic routing turned off: Envoy answers 503 UH itself
        RouterUpstream("edge-2", "envoy", "models", requests=0, healthy_min=0, members_max=3, panic=0,
                       none_healthy=400),
        # one host of three failing, no panic: the cluster routes around it
        RouterUpstream("edge-3", "envoy", "models", requests=900, healthy_min=2, members_max=3, panic=0,
                       none_healthy=0),
        # HAProxy: b1 DOWN (its checks failing), b2 UP but answering 5xx; every 5xx came from b2
        RouterUpstream("edge-4", "haproxy", "be", requests=1000, errors_5xx=120, server_errors_5xx=120,
                       healthy_min=2, members_max=3,
                       servers=(RouterServer("b1", "DOWN"),
                                RouterServer("b2", "UP", {"hrsp_5xx": 120.0, "stot": 330.0}))),
        # healthy everything: nothing to say
        RouterUpstream("edge-5", "envoy", "models", requests=900, healthy_min=3, members_max=3, panic=0),
        RouterUpstream("edge-5", "haproxy", "be", requests=900, errors_5xx=1, server_errors_5xx=1, healthy_min=2,
                       members_max=2),
    ]
    found = service_findings(routers, [], 120)
    by = {(f.code, f.location.file if f.location else ""): f for f in found}
    assert set(by) == {("R010", "edge-1 envoy"), ("R003", "edge-1 envoy"), ("R013", "edge-2 envoy"),
                       ("R003", "edge-2 envoy"), ("R003", "edge-3 envoy"), ("R003", "edge-4 haproxy"),
                       ("R010", "edge-4 haproxy")}
    panic = by[("R010", "edge-1 envoy")]
    assert panic.evidence["panic_requests"] == 600 and panic.evidence["membership_healthy"] == 0
    assert panic.evidence["membership_total"] == 2 and "panic mode" in panic.title
    assert "2 of 2 hosts unhealthy" in by[("R003", "edge-1 envoy")].title
    assert "panic mode" in by[("R003", "edge-1 envoy")].title
    assert by[("R013", "edge-2 envoy")].evidence["cause"] == "no_healthy_upstream"
    assert "1 of 3 hosts unhealthy" in by[("R003", "edge-3 envoy")].title
    haproxy = [f for f in found if f.code == "R003" and f.evidence["node"] == "edge-4"]
    assert {(f.evidence["router_name"], f.evidence["state"]) for f in haproxy} == {("b1", "down"), ("b2", "healthy")}
    assert next(f for f in haproxy if f.evidence["router_name"] == "b2").evidence["errors"] == 120
    # ... and HAProxy holds b2 healthy (UP) while 36% of its requests fail: the health check and traffic disagree
    assert by[("R010", "edge-4 haproxy")].evidence["router_name"] == "b2"
    # HAProxy's own 5xx (a full queue, no server left) is what R013 counts: not the servers' 5xx
    assert not any(f.code == "R013" and f.evidence["node"] == "edge-4" for f in found)
    own = [RouterUpstream("edge-6", "haproxy", "be", requests=500, errors_5xx=200, server_errors_5xx=20,
                          healthy_min=0, members_max=2, servers=(RouterServer("b1", "DOWN"), RouterServer("b2", "DOWN")))]
    r013 = [f for f in service_findings(own, [], 120) if f.code == "R013"]
    assert [(f.evidence["cause"], f.evidence["rejected"]) for f in r013] == [("queue", 180.0)]


def test_nginx_exporter_rows_go_through_the_router_rules() -> None:
    from infradoctor.fleet.evidence import RouterUpstream
    from infradoctor.fleet.service_view import router_evidence, service_findings

    fine = RouterUpstream("web-1", "nginx", "-", requests=5000, accepted=800, handled=800, connections_active_max=40,
                          connections_waiting_max=30, up_min=1)
    short = RouterUpstream("web-2", "nginx", "-", requests=5000, accepted=900, handled=700, connections_active_max=1024,
                           up_min=1)
    evidence = router_evidence("web-2", "nginx", [short])
    assert evidence.window.counters["client_requests"] == 5000 and "requests" not in evidence.window.counters
    assert evidence.window.gauges["connections_active"].max == 1024
    found = service_findings([fine, short], [], 120)
    assert [(f.code, f.evidence["node"], f.evidence["cause"], f.evidence["rejected"]) for f in found] == [
        ("R013", "web-2", "connections_dropped", 200.0)]


def test_router_queries_ask_for_upstream_health_and_nginx() -> None:
    scope = q.Scope("", "3600s", "30s")
    queries = q.router_queries(scope)
    for key, name in (("envoy.panic", "envoy_cluster_lb_healthy_panic"),
                      ("envoy.none_healthy", "envoy_cluster_upstream_cx_none_healthy"),
                      ("haproxy.server_errors_5xx", "haproxy_server_http_responses_total"),
                      ("nginx.requests", "nginx_http_requests_total"), ("nginx.accepted", "nginx_connections_accepted"),
                      ("nginx.handled", "nginx_connections_handled"), ("nginx.up_min", "nginx_up"),
                      ("nginx.connections_active_max", "nginx_connections_active"),
                      ("nginx.connections_waiting_max", "nginx_connections_waiting")):
        assert f'__name__="{name}"' in queries[key], key
    servers = q.router_server_queries(scope)
    assert set(servers) == {"state", "hrsp_5xx", "econ", "eresp", "stot"}
    assert all(expr.startswith(f"topk({q.ROUTER_SERVER_LIMIT},") for k, expr in servers.items() if k != "stot")
    assert 'state!="UP"' in servers["state"] and " and on (" in servers["stot"]


def test_an_idle_gpu_at_its_power_cap_is_not_throttled_over_the_window() -> None:
    """The power cap bit on an idle GPU is power management, not throttling (issue 16): fleet judges it as node does."""
    stats = _healthy(random.Random(5))
    stats["util_pct"] = Stat(mean=0.0, max=1.0)
    idle = FleetGpu("n3", "0", None, "T4", signals=stats, throttled_share=0.0, reason_share={"sw_power_cap": 0.9})
    busy_stats = _healthy(random.Random(6))
    busy_stats["util_pct"] = Stat(mean=95.0, max=100.0)
    busy = FleetGpu("n3", "1", None, "T4", signals=busy_stats, throttled_share=0.0,
                    reason_share={"sw_power_cap": 0.9})
    evidence = node_evidence("n3", [idle, busy], None, window_s=3600, steps=120, source="t")
    found = node_findings("n3", evidence, NodeOptions())
    assert [f.code for f in found] == ["N003"] and "GPU 1" in found[0].title
