"""``route --router-stats``: real Envoy, HAProxy and nginx report their own retries, queues, rejections and health.

The three Envoy scenarios of issue 19: retries on connect failure, a circuit breaker of 1 connection / 2 pending
under 8 clients, and every host failing active health checks (panic mode).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from infradoctor.procs import free_port
from tests.route.servers import backends, envoy_config, haproxy_stats_config, nginx_config
from tests.support.servers import envoy, haproxy, nginx

pytestmark = pytest.mark.integration


def route(cli: Callable[..., Any], tmp_path: Path, router: str, backend_urls: Sequence[str], *extra: str,
          validator: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    out = tmp_path / f"route_{free_port()}.json"
    args = ["route", "--router", router, *(a for u in backend_urls for a in ("--backend", u))]
    args += ["--duration", "2.5", "--connects", "5", "--json", str(out), "--quiet", *extra]
    run = cli(*args)
    assert run.exit_code == 0, run.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    validator(data)
    return data


def codes(result: dict[str, Any]) -> list[str]:
    return [f["code"] for f in result["findings"]]


def finding(result: dict[str, Any], code: str, **where: Any) -> dict[str, Any]:
    return next(f for f in result["findings"] if f["code"] == code
                and all(f["evidence"].get(k) == v for k, v in where.items()))


def test_envoy_retries_on_connect_failure_are_retries_not_overhead(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 3}]) as bs:
        admin, dead = free_port(), f"127.0.0.1:{free_port()}"
        conf = envoy_config([f"127.0.0.1:{bs[0].port}", dead], admin_port=admin, retry_on="connect-failure")
        with envoy(conf, tmp_path, admin_port=admin) as r:
            result = route(cli, tmp_path, r.url + "/predict", [bs[0].url, "http://" + dead],
                           "--router-stats", f"http://127.0.0.1:{admin}", validator=result_validator)
    stats = result["metrics"]["router_stats"]
    assert stats["kind"] == "envoy" and stats["format"] == "envoy-json+envoy-clusters-json"
    r005 = finding(result, "R005", source="router-stats")
    assert r005["evidence"]["extra_attempts"] == stats["counters"]["retries"] > 0
    assert r005["evidence"]["retry_backoff"] == r005["evidence"]["extra_attempts"]  # each retry waited its backoff
    assert r005["evidence"]["connect_failures"] >= r005["evidence"]["extra_attempts"]
    assert "R001" not in codes(result), [f["title"] for f in result["findings"]]  # the time was backoff
    # the dead host is named from Envoy's own per-host counters too (merged with the direct-path R003)
    r003 = finding(result, "R003", backend="http://" + dead)
    assert r003["evidence"]["state"] == "down"


def test_envoy_circuit_breaker_rejections_are_named_with_their_cause(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 20}]) as bs:
        admin = free_port()
        conf = envoy_config([f"127.0.0.1:{bs[0].port}"], admin_port=admin, max_connections=1, max_pending=2)
        with envoy(conf, tmp_path, admin_port=admin) as r:
            result = route(cli, tmp_path, r.url + "/predict", [bs[0].url], "--concurrency", "8",
                           "--router-stats", f"http://127.0.0.1:{admin}/stats?format=json",
                           validator=result_validator)
    routed = result["metrics"]["paths"][0]
    assert routed["errors"].get("http_503", 0) > 0.3 * routed["requests"]
    r013 = finding(result, "R013")
    assert r013["evidence"]["cause"] == "pending_overflow"
    assert r013["evidence"]["limits"]["max_pending_requests"] == 2
    assert r013["evidence"]["limits"]["max_connections"] == 1
    assert r013["evidence"]["rejected"] == routed["errors"]["http_503"]  # every 503 the client saw was Envoy's UO
    r009 = finding(result, "R009")
    assert r009["evidence"]["pending_max"] >= 1 and r009["evidence"]["rejected"] == r013["evidence"]["rejected"]
    assert "R001" not in codes(result)  # the +400 ms of issue 19 was queue wait


def test_envoy_panic_mode_when_every_host_fails_active_health_checks(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 3, "health_status": 503}, {"latency_ms": 3, "health_status": 503}]) as bs:
        admin = free_port()
        conf = envoy_config([f"127.0.0.1:{b.port}" for b in bs], admin_port=admin, health_path="/health")
        with envoy(conf, tmp_path, admin_port=admin) as r:
            time.sleep(0.6)  # three health-check intervals: both hosts marked failed
            result = route(cli, tmp_path, r.url + "/predict", [b.url for b in bs], "--router-stats",
                           f"http://127.0.0.1:{admin}", validator=result_validator)
    assert result["metrics"]["paths"][0]["errors"] == {}  # the predictions work: only the router's word shows it
    r010 = finding(result, "R010", source="router-stats")
    assert r010["evidence"]["panic_requests"] > 0 and r010["evidence"]["membership_healthy"] == 0
    assert set(r010["evidence"]["hosts"].values()) == {"/failed_active_hc"}
    hosts = {h["address"]: h["state"] for h in result["metrics"]["router_stats"]["hosts"]}
    assert hosts == {f"127.0.0.1:{b.port}": "failing" for b in bs}


def test_haproxy_queue_and_server_names_from_the_runtime_api(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 30}, {"latency_ms": 30}]) as bs:
        stats_port, runtime_port = free_port(), free_port()
        conf = haproxy_stats_config(bs, stats_port=stats_port, maxconn=1, maxqueue=1, queue_timeout_ms=100)
        runtime = f"    stats socket ipv4@127.0.0.1:{runtime_port} level operator"
        with haproxy(conf, tmp_path, global_extra=runtime) as r:
            result = route(cli, tmp_path, r.url + "/predict", [b.url for b in bs], "--concurrency", "8",
                           "--router-stats", f"tcp://127.0.0.1:{runtime_port}", validator=result_validator)
    dist = result["metrics"]["distribution"]
    assert dist["header"] == "x-served-by"
    # X-Served-By says "b0"/"b1": HAProxy's own names, mapped to the backends by the addresses it reports; only
    # the 503s HAProxy answered itself (a request that timed out in the queue has no server) stay unattributed
    routed = result["metrics"]["paths"][0]
    assert dist["attributed"] + routed["errors"].get("http_503", 0) == routed["requests"], dist
    assert dist["attributed"] > 0.8 * routed["requests"]
    assert not {"b0:80", "b1:80"} & set(dist["unknown_addresses"])
    r009 = finding(result, "R009")
    assert r009["evidence"]["router"] == "haproxy" and r009["evidence"]["pending_max"] >= 1
    assert r009["evidence"]["queue_time_ms_max"] > 0
    assert "R001" not in codes(result)


def test_haproxy_queue_timeouts_are_router_rejections(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 60}]) as bs:
        stats_port = free_port()
        conf = haproxy_stats_config(bs, stats_port=stats_port, maxconn=1, maxqueue=2, queue_timeout_ms=50)
        with haproxy(conf, tmp_path) as r:
            result = route(cli, tmp_path, r.url + "/predict", [bs[0].url], "--concurrency", "8",
                           "--router-stats", f"http://127.0.0.1:{stats_port}/stats;csv", validator=result_validator)
    r013 = finding(result, "R013")
    assert r013["evidence"]["cause"] == "queue" and r013["evidence"]["router"] == "haproxy"
    assert r013["evidence"]["rejected"] == result["metrics"]["paths"][0]["errors"]["http_503"]
    # the stats page names servers without addresses: X-Served-By: b0 cannot be mapped, and the note says how
    note = next(e for e in result["errors"] if e["source"] == "route.distribution" and "runtime API" in e["message"])
    assert "b0" in note["message"]


def test_healthy_nginx_with_stub_status(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 3}, {"latency_ms": 3}]) as bs:
        conf = nginx_config(bs).replace("        location / {", "        location /stub { stub_status; }\n"
                                        "        location / {", 1)
        with nginx(conf, tmp_path) as r:
            result = route(cli, tmp_path, r.url + "/predict", [b.url for b in bs], "--router-stats",
                           r.url + "/stub", validator=result_validator)
    stats = result["metrics"]["router_stats"]
    assert stats["kind"] == "nginx"
    assert stats["counters"]["client_requests"] >= result["metrics"]["paths"][0]["requests"]
    assert stats["counters"]["accepts"] == stats["counters"]["handled"]
    assert not [c for c in codes(result) if c.startswith("R01") or c in ("R005", "R009")]


def test_stats_endpoint_that_is_missing_or_hangs_gives_a_note_not_a_delay(cli, tmp_path, result_validator) -> None:
    from tests.route.hostile import hostile_peer

    with backends(tmp_path, [{"latency_ms": 3}]) as bs, nginx(nginx_config(bs), tmp_path) as r, \
            hostile_peer("trickle") as slow:
        start = time.perf_counter()
        result = route(cli, tmp_path, r.url + "/predict", [bs[0].url], "--router-stats",
                       f"http://127.0.0.1:{free_port()}", "--router-stats", slow + "/stats",
                       "--server-metrics", slow + "/metrics", validator=result_validator)
        elapsed = time.perf_counter() - start
    notes = [e for e in result["errors"] if e["source"] in ("route.router-stats", "route.server-metrics")]
    assert len(notes) == 3, result["errors"]
    assert result["metrics"]["router_stats"] is None and result["metrics"]["paths"][0]["ok"] > 0
    assert elapsed < 2.5 + 12, elapsed  # the run, the probes, and at most a read deadline per target twice
