"""Every recorded exposition in tests/corpus/metrics read by the router and model-server parsers.

The expected values are read from each file by an independent, naive reader (JSON lookups, CSV columns, plain
line matching), so a parser bug cannot agree with itself.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from infradoctor.telemetry.router import parse_router_stats
from infradoctor.telemetry.server import parse_server_metrics

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "metrics"


def _prom_total(path: Path, name: str) -> float:
    """Sum of the samples of ``name`` (naive: every line starting with ``name{`` or ``name ``)."""
    total = 0.0
    for line in path.read_text().splitlines():
        if line.startswith((name + "{", name + " ")):
            total += float(line.rsplit(" ", 1)[-1])
    return total


def _envoy_json(path: Path, stat: str) -> float:
    data = json.loads(path.read_text())
    return sum(s["value"] for s in data["stats"] if s.get("name") == f"cluster.app.{stat}")


def test_envoy_stats_json() -> None:
    path = CORPUS / "envoy-1.40.0-stats.json"
    snap = parse_router_stats(path.read_bytes(), path.name)
    assert (snap.kind, snap.format, snap.problem) == ("envoy", "envoy-json", None)
    for stat, key in (("upstream_rq_retry", "retries"), ("upstream_rq_retry_success", "retry_success"),
                      ("upstream_cx_connect_fail", "connect_fail"), ("upstream_rq_total", "requests"),
                      ("membership_healthy", "membership_healthy"), ("lb_healthy_panic", "panic"),
                      ("upstream_rq_pending_overflow", "pending_overflow")):
        assert snap.values[key] == _envoy_json(path, stat), stat
    # the run: every request sent to the dead host failed to connect and was retried once, on the live one
    assert snap.values["retries"] == snap.values["connect_fail"] == snap.values["retry_success"] > 0
    assert snap.values["client_requests"] == sum(
        s["value"] for s in json.loads(path.read_text())["stats"] if s.get("name") == "http.ingress.downstream_rq_total")


@pytest.mark.parametrize("name", ["envoy-1.40.0-clusters.json", "envoy-1.40.0-clusters.txt"])
def test_envoy_clusters(name: str) -> None:
    path = CORPUS / name
    snap = parse_router_stats(path.read_bytes(), name)
    assert snap.kind == "envoy"
    text = path.read_text()
    assert snap.limits["max_pending_requests"] == 16 and snap.limits["max_connections"] == 64
    assert [h.name for h in snap.hosts] == ["b0", "b1"]
    for host in snap.hosts:
        assert host.address is not None and host.address.split(":")[1] in text
        assert host.state == "healthy"  # no health checks configured: Envoy keeps the dead host in rotation
    dead = snap.hosts[1]
    assert dead.counters["cx_connect_fail"] > 0 and "cx_connect_fail" not in snap.hosts[0].counters or \
        snap.hosts[0].counters["cx_connect_fail"] == 0


def test_envoy_prometheus_agrees_with_its_json() -> None:
    prom = parse_router_stats((CORPUS / "envoy-1.40.0-stats-prometheus-cluster.prom").read_bytes())
    js = parse_router_stats((CORPUS / "envoy-1.40.0-stats.json").read_bytes())
    assert prom.format == "envoy-prometheus"
    for key in ("retries", "retry_success", "connect_fail", "requests", "pending_total", "membership_total",
                "client_requests"):
        assert prom.values[key] == js.values[key], key


def test_envoy_old_prometheus_with_ungrouped_families() -> None:
    path = CORPUS / "envoy-stats-prometheus-old-ungrouped-datadog-fixture-head.prom"
    snap = parse_router_stats(path.read_bytes())
    assert snap.kind == "envoy"
    assert snap.values["requests"] == _prom_total(path, "envoy_cluster_upstream_rq_total")


def _csv_rows(path: Path) -> list[dict[str, str]]:
    lines = path.read_text().splitlines()
    header = lines[0].lstrip("# ").split(",")
    return [dict(zip(header, row, strict=False)) for row in csv.reader(lines[1:])]


@pytest.mark.parametrize("name", ["haproxy-2.6.12-stats.csv", "haproxy-stats-csv-datadog-mock.csv"])
def test_haproxy_csv(name: str) -> None:
    path = CORPUS / name
    snap = parse_router_stats(path.read_bytes(), name)
    assert (snap.kind, snap.format) == ("haproxy", "haproxy-csv")
    rows = _csv_rows(path)
    servers = [r for r in rows if r["svname"] not in ("FRONTEND", "BACKEND")]
    assert [h.name for h in snap.hosts] == [r["svname"] for r in servers]
    backend_stot = sum(float(r["stot"] or 0) for r in rows if r["svname"] == "BACKEND")
    assert snap.values["requests"] == backend_stot


def test_haproxy_mock_states() -> None:
    snap = parse_router_stats((CORPUS / "haproxy-stats-csv-datadog-mock.csv").read_bytes())
    by_flags = {h.flags: h.state for h in snap.hosts}
    assert by_flags.get("DOWN") == "down" and by_flags.get("MAINT") == "maint"
    assert by_flags.get("UP 1/2") == "failing"  # failing its checks, still in rotation
    assert by_flags.get("no check", by_flags.get("NO CHECK")) == "healthy"


def test_haproxy_servers_state_gives_addresses() -> None:
    path = CORPUS / "haproxy-2.6.12-servers-state.txt"
    snap = parse_router_stats(path.read_bytes())
    rows = [ln.split() for ln in path.read_text().splitlines()[2:] if ln.strip()]
    assert [(h.name, h.address) for h in snap.hosts] == [(r[3], f"{r[4]}:{r[18]}") for r in rows]


def test_haproxy_promex() -> None:
    path = CORPUS / "haproxy-2.6.12-promex.prom"
    snap = parse_router_stats(path.read_bytes())
    assert snap.kind == "haproxy" and snap.problem is None  # NaN limits are not unreadable lines
    assert snap.values["requests"] == _prom_total(path, "haproxy_backend_sessions_total")
    assert {h.name for h in snap.hosts} == {"b0", "b1"}


@pytest.mark.parametrize("name", ["nginx-1.22.1-stub-status.txt", "nginx-stub-status-docs-example.txt"])
def test_nginx_stub_status(name: str) -> None:
    path = CORPUS / name
    snap = parse_router_stats(path.read_bytes())
    numbers = path.read_text().split()
    accepts, handled, requests = (float(v) for v in numbers[numbers.index("requests") + 1:][:3])
    assert snap.kind == "nginx"
    assert (snap.values["accepts"], snap.values["handled"], snap.values["client_requests"]) == (accepts, handled,
                                                                                              requests)
    assert snap.values["connections_active"] == float(numbers[2])


def test_nginx_prometheus_exporter() -> None:
    from infradoctor.findings import run_rules
    from infradoctor.telemetry import dump_evidence

    path = CORPUS / "nginx-prometheus-exporter-0.11.0-metrics.prom"
    snap = parse_router_stats(path.read_bytes(), path.name)
    assert snap.kind == "nginx" and snap.format == "nginx-prometheus" and snap.problem is None
    for key, metric in (("accepts", "nginx_connections_accepted"), ("handled", "nginx_connections_handled"),
                        ("client_requests", "nginx_http_requests_total"), ("waiting", "nginx_connections_waiting"),
                        ("connections_active", "nginx_connections_active")):
        assert snap.values[key] == _prom_total(path, metric), key
    assert run_rules(dump_evidence(snap)) == []  # every accepted connection was handled
    # the same exporter when it could not read stub_status, and when worker_connections ran out
    down = path.read_text().replace("nginx_up 1", "nginx_up 0")
    assert "nginx_up 0" in (parse_router_stats(down).problem or "")
    accepted = _prom_total(path, "nginx_connections_accepted")
    dropped = path.read_text().replace(f"nginx_connections_handled {accepted:.0f}",
                                       f"nginx_connections_handled {accepted - 5:.0f}")
    found = run_rules(dump_evidence(parse_router_stats(dropped, path.name)))
    assert [(f.code, f.evidence["cause"], f.evidence["rejected"]) for f in found] == [
        ("R013", "connections_dropped", 5.0)]


SERVERS = {
    "vllm-datadog-fixture-v0-and-v1-names.prom": ("vllm", {
        "waiting": "vllm:num_requests_waiting", "running": "vllm:num_requests_running",
        "preemptions": "vllm:num_preemptions_total", "kv_cache_usage": "vllm:kv_cache_usage_perc",
        "queue_time_s_count": "vllm:request_queue_time_seconds_count"}),
    "sglang-docs-production-metrics-example.prom": ("sglang", {
        "waiting": "sglang:num_queue_reqs", "running": "sglang:num_running_reqs",
        "kv_cache_usage": "sglang:token_usage"}),
    "tgi-datadog-fixture.prom": ("tgi", {"waiting": "tgi_queue_size", "running": "tgi_batch_current_size",
                                         "requests_finished": "tgi_request_success"}),
    "triton-datadog-fixture.prom": ("triton", {"waiting": "nv_inference_pending_request_count",
                                               "batch_items": "nv_inference_count",
                                               "batch_executions": "nv_inference_exec_count"}),
    "torchserve-datadog-fixture.prom": ("torchserve", {"requests_finished": "ts_inference_requests_total"}),
}


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_model_server_expositions(name: str) -> None:
    path = CORPUS / name
    kind, expected = SERVERS[name]
    snap = parse_server_metrics(path.read_bytes(), name)
    assert snap.kind == kind and snap.problem is None
    for key, metric in expected.items():
        assert snap.names[key] == metric
        assert snap.values[key] == pytest.approx(_prom_total(path, metric)), key


def test_vllm_v1_kv_name_is_preferred_over_v0() -> None:
    text = (CORPUS / "vllm-datadog-fixture-v0-and-v1-names.prom").read_text()
    assert "vllm:gpu_cache_usage_perc" in text and "vllm:kv_cache_usage_perc" in text
    assert parse_server_metrics(text).names["kv_cache_usage"] == "vllm:kv_cache_usage_perc"
    v0_only = "\n".join(ln for ln in text.splitlines() if "kv_cache_usage_perc" not in ln)
    assert parse_server_metrics(v0_only).names["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"


@pytest.mark.parametrize("name", ["dcgm-exporter-datadog-fixture-t4.prom", "node-exporter-e2e-fixture-trimmed.prom",
                                  "kube-state-metrics-pod-test-wants.prom"])
def test_other_exporters_are_neither_router_nor_model_server(name: str) -> None:
    body = (CORPUS / name).read_bytes()
    assert parse_server_metrics(body).kind == "unknown"
    snap = parse_router_stats(body)
    assert snap.kind == "prometheus" and not snap.values and snap.problem


def test_a_saved_dump_gives_findings() -> None:
    from infradoctor.findings import run_rules
    from infradoctor.telemetry import dump_evidence

    # the recorded Envoy run: every request to the dead host b1 failed to connect and was retried on b0
    stats = parse_router_stats((CORPUS / "envoy-1.40.0-stats.json").read_bytes(), "envoy-1.40.0-stats.json")
    clusters = parse_router_stats((CORPUS / "envoy-1.40.0-clusters.json").read_bytes())
    found = {(f.code, f.evidence.get("router_name")): f for f in run_rules(dump_evidence(stats.merged(clusters)))}
    retries = stats.values["retries"]
    assert ("R005", None) in found and found[("R005", None)].evidence["extra_attempts"] == retries
    assert found[("R005", None)].evidence["client_requests"] == stats.values["client_requests"]
    assert ("R003", "b1") in found and found[("R003", "b1")].evidence["errors"] == retries
