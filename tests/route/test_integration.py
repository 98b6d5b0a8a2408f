"""Real routers (nginx, HAProxy, a small aiohttp router) in front of real aiohttp backends, probed by the CLI."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from infradoctor.procs import free_port
from tests.route.servers import backends, haproxy_config, nginx_config, py_router
from tests.support.servers import Running, haproxy, nginx, python_server

pytestmark = pytest.mark.integration


def route(
    cli: Callable[..., Any],
    tmp_path: Path,
    router: str,
    backend_urls: Sequence[str],
    *extra: str,
    validator: Callable[[dict[str, Any]], None] | None = None,
    exit_code: int = 0,
) -> dict[str, Any]:
    out = tmp_path / f"route_{free_port()}.json"
    args = ["route", "--router", router]
    for url in backend_urls:
        args += ["--backend", url]
    args += ["--duration", "2", "--connects", "10", "--json", str(out), "--quiet", *extra]
    run = cli(*args)
    assert run.exit_code == exit_code, run.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    if validator is not None:
        validator(data)
    return data


def codes(result: dict[str, Any]) -> list[str]:
    return [f["code"] for f in result["findings"]]


def finding(result: dict[str, Any], code: str) -> dict[str, Any]:
    return next(f for f in result["findings"] if f["code"] == code)


def urls(running: Sequence[Running]) -> list[str]:
    return [r.url for r in running]


def near_timeout(inferred_ms: float, configured_ms: float) -> bool:
    """An inferred router timeout matches the configured one: never below it, late by scheduling noise at most
    (well short of the 500 ms the backend takes, so an inference that reads the backend's latency still fails)."""
    return configured_ms * 0.95 <= inferred_ms < configured_ms * 1.7


def test_healthy_nginx_pool_has_no_findings(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 3}, {"latency_ms": 3}]) as bs, nginx(nginx_config(bs), tmp_path) as r:
        result = route(cli, tmp_path, r.url + "/predict", urls(bs), "--connects", "50", validator=result_validator)
    # nothing above low on a healthy pool (a noisy machine may tip an informational one), never R007 from the probe
    assert [f for f in result["findings"] if f["severity"] not in ("info", "low")] == [], result["findings"]
    assert "R007" not in codes(result)
    assert all(c["attempts"] == 50 and c["failures"] == {} for c in result["metrics"]["network"]["connect"])
    metrics = result["metrics"]
    assert metrics["distribution"]["header"] == "x-upstream-addr"
    assert metrics["distribution"]["unattributed"] == 0
    assert [b["share"] for b in metrics["backends"]] == pytest.approx([0.5, 0.5], abs=0.02)
    assert metrics["paths"][0]["kind"] == "router" and metrics["paths"][0]["errors"] == {}
    # nginx on loopback adds well under a few milliseconds (one-sided and generous: a shared CI machine is noisy)
    assert metrics["attribution"]["added_p50_ms"]["value"] < 20.0
    assert all(c["requests_per_connection"] > 5 for c in metrics["network"]["connect"])
    assert all(b["health"]["healthy"] for b in metrics["backends"])


def test_backend_failing_a_share_of_requests_is_named(cli, tmp_path, result_validator) -> None:
    specs = [{"latency_ms": 3}, {"latency_ms": 3, "fail_rate": 0.3, "torch": True}]
    with backends(tmp_path, specs) as bs, nginx(nginx_config(bs, max_fails=0), tmp_path) as r:
        result = route(cli, tmp_path, r.url + "/predict", urls(bs), validator=result_validator)
    r003 = finding(result, "R003")
    assert r003["evidence"]["backend"] == bs[1].url and r003["evidence"]["state"] == "failing"
    assert 0.15 < r003["evidence"]["direct_error_rate"] < 0.45
    assert bs[1].url in r003["title"]
    r010 = finding(result, "R010")  # /health answers 200 while predictions fail
    assert r010["evidence"]["backend"] == bs[1].url and r010["evidence"]["health_status"] == 200
    assert [f["evidence"]["backend"] for f in result["findings"] if f["code"] == "R003"] == [bs[1].url]
    assert "R001" not in codes(result), [f for f in result["findings"] if f["code"] == "R001"]


def test_haproxy_active_health_check_keeps_a_failing_backend(cli, tmp_path, result_validator) -> None:
    specs = [{"latency_ms": 2}, {"latency_ms": 2, "fail_rate": 0.5, "fail_status": 500}]
    with backends(tmp_path, specs) as bs, haproxy(haproxy_config(bs, check=True), tmp_path) as r:
        result = route(cli, tmp_path, r.url + "/predict", urls(bs), "--health-path", "/health",
                       validator=result_validator)
        haproxy_log = r.log_text()
    # HAProxy's own GET /health passes, so it keeps sending half of the traffic to the failing backend
    assert "DOWN" not in haproxy_log
    assert 0.15 < result["metrics"]["paths"][0]["error_rate"] < 0.4
    assert finding(result, "R010")["evidence"]["backend"] == bs[1].url
    assert finding(result, "R003")["evidence"]["backend"] == bs[1].url
    assert result["metrics"]["backends"][1]["health"]["url"].endswith("/health")


def test_passive_health_checks_eject_the_failing_backend(cli, tmp_path, result_validator) -> None:
    specs = [{"latency_ms": 3}, {"latency_ms": 3, "fail_rate": 0.4}]
    conf_args = {"max_fails": 1, "fail_timeout_s": 1, "next_upstream": "error timeout http_500"}
    with backends(tmp_path, specs) as bs, nginx(nginx_config(bs, **conf_args), tmp_path) as r:
        result = route(cli, tmp_path, r.url + "/predict", urls(bs), validator=result_validator)
    metrics = result["metrics"]
    assert metrics["paths"][0]["error_rate"] < 0.02  # nginx retried the 500s and then ejected the backend
    assert metrics["backends"][1]["share"] < 0.1
    assert metrics["retries"]["source"] == "upstream-list" and metrics["retries"]["retried_requests"] >= 1
    assert finding(result, "R003")["evidence"]["backend"] == bs[1].url  # the direct path still shows it
    assert "R004" not in codes(result)  # the failing backend rightly gets less traffic


def test_nginx_next_upstream_retries_amplify_load(cli, tmp_path, result_validator) -> None:
    specs = [{"latency_ms": 3}, {"latency_ms": 3, "fail_rate": 0.5}]
    conf_args = {"max_fails": 0, "next_upstream": "error timeout http_500"}
    with backends(tmp_path, specs) as bs, nginx(nginx_config(bs, **conf_args), tmp_path) as r:
        result = route(cli, tmp_path, r.url + "/predict", urls(bs), "--counter-path", "/stats",
                       validator=result_validator)
    r005 = finding(result, "R005")
    assert r005["evidence"]["counted_from"] == "upstream-list"
    assert 1.1 < r005["evidence"]["amplification"] < 1.5  # half of the requests sent to b1 were retried on b0
    assert "R001" not in codes(result), [f for f in result["findings"] if f["code"] == "R001"]  # retries are not overhead
    counters = [b["counter_delta"] for b in result["metrics"]["backends"]]
    routed_attempts = sum(counters) - sum(p["requests"] for p in result["metrics"]["paths"][1:])
    assert routed_attempts == r005["evidence"]["backend_attempts"]  # the counters agree with the header


def test_slow_router_is_blamed(cli, tmp_path, result_validator) -> None:
    specs = [{"latency_ms": 5}, {"latency_ms": 5, "fastapi": True}]
    with backends(tmp_path, specs) as bs, py_router(tmp_path, bs, delay_ms=25) as r:
        result = route(cli, tmp_path, r.url + "/predict", urls(bs), validator=result_validator)
    r001 = finding(result, "R001")
    added = r001["evidence"]["added_p50_ms"]
    assert 20.0 < added < 150.0 and r001["evidence"]["added_p50_ms_ci"][0] > 15.0  # 25 ms added; noisy CI
    assert "R002" not in codes(result)
    assert result["metrics"]["headline"]["router_added_p50_ms"] == pytest.approx(added)
    per_backend = result["metrics"]["attribution"]["per_backend"]
    assert {b["backend"] for b in per_backend} == set(urls(bs))


def test_slow_backends_behind_fast_router(cli, tmp_path, result_validator) -> None:
    specs = [{"latency_ms": 60}, {"latency_ms": 60}]
    with backends(tmp_path, specs) as bs, nginx(nginx_config(bs), tmp_path) as r:
        result = route(cli, tmp_path, r.url + "/predict", urls(bs), "--slow-ms", "50", "--concurrency", "6",
                       validator=result_validator)
    assert "R002" in codes(result)
    assert "R001" not in codes(result)
    assert finding(result, "R002")["evidence"]["direct_p50_ms"] >= 55


def test_skewed_weights_are_uneven_unless_expected(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 2}, {"latency_ms": 2}]) as bs:
        with haproxy(haproxy_config(bs, weights=[3, 1]), tmp_path) as r:
            uneven = route(cli, tmp_path, r.url + "/predict", urls(bs), validator=result_validator)
            expected = route(cli, tmp_path, r.url + "/predict", urls(bs), "--weights", "3,1",
                             "--backend-header", "X-Served-By")
    assert uneven["metrics"]["distribution"]["header"] == "x-served-by"
    r004 = finding(uneven, "R004")
    assert r004["evidence"]["shares"][bs[0].url] == pytest.approx(0.75, abs=0.05)
    assert r004["evidence"]["p_value"] < 0.001
    assert "R004" not in codes(expected)
    assert expected["metrics"]["distribution"]["expected_shares"][bs[0].url] == pytest.approx(0.75)


def test_backend_that_is_down(cli, tmp_path, result_validator) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with backends(tmp_path, [{"latency_ms": 2}]) as bs:
        up = bs[0]
        conf = nginx_config([up], max_fails=1).replace(
            f"server 127.0.0.1:{up.port}", f"server 127.0.0.1:{up.port} max_fails=1;\n        server {dead[7:]}", 1
        )
        with nginx(conf, tmp_path) as r:
            result = route(cli, tmp_path, r.url + "/predict", [up.url, dead], validator=result_validator)
    r003 = finding(result, "R003")
    assert r003["evidence"]["backend"] == dead and r003["evidence"]["state"] == "down"
    assert dead in r003["title"]
    connect = {c["name"]: c for c in result["metrics"]["network"]["connect"]}
    assert connect[dead]["failures"] == {"connect_refused": 3}
    assert result["metrics"]["paths"][0]["error_rate"] == 0  # nginx moved on to the live backend
    assert "R004" not in codes(result) and "R010" not in codes(result)


def test_no_healthy_upstream(cli, tmp_path, result_validator) -> None:
    dead = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    servers = "\n".join(f"        server {d[7:]};" for d in dead)
    conf = f"""
    upstream app {{
{servers}
    }}
    server {{ listen 127.0.0.1:{{port}}; location / {{ proxy_pass http://app; }} }}
"""
    with nginx(conf, tmp_path) as r:
        result = route(cli, tmp_path, r.url + "/predict", dead, "--duration", "0.5", validator=result_validator)
    r006 = finding(result, "R006")
    assert r006["evidence"]["backends"] == dict.fromkeys(dead, "down")
    assert set(r006["evidence"]["routed_errors"]) == {"http_502"}
    assert result["findings"][0]["code"] == "R006"  # critical comes first
    assert sorted(f["evidence"]["backend"] for f in result["findings"] if f["code"] == "R003") == sorted(dead)


def test_router_timeout_shorter_than_backend_latency(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 500}]) as bs:
        with nginx(nginx_config(bs, read_timeout_s=0.25, next_upstream="off"), tmp_path) as r:
            result = route(cli, tmp_path, r.url + "/predict", urls(bs), "--duration", "2.5",
                           validator=result_validator)
    r008 = finding(result, "R008")
    assert near_timeout(r008["evidence"]["inferred_timeout_ms"], 250)
    assert r008["evidence"]["timeout_below_backend_p99"] is True
    assert r008["evidence"]["backend_p99_ms"] >= 490
    assert result["metrics"]["timeouts"]["statuses"] == {"http_504": r008["evidence"]["clustered_errors"]}


def test_nginx_retrying_timeouts_on_the_next_upstream(cli, tmp_path, result_validator) -> None:
    # nginx's default proxy_next_upstream retries a timed-out attempt on the next backend: 504 after 2 x 250 ms
    with backends(tmp_path, [{"latency_ms": 500}, {"latency_ms": 500}]) as bs:
        conf = nginx_config(bs, read_timeout_s=0.25, max_fails=0, next_upstream="error timeout")
        with nginx(conf, tmp_path) as r:
            result = route(cli, tmp_path, r.url + "/predict", urls(bs), "--duration", "1.5",
                           validator=result_validator)
    r008 = finding(result, "R008")
    assert r008["evidence"]["attempts"] == 2
    assert near_timeout(r008["evidence"]["inferred_timeout_ms"], 250)
    assert r008["evidence"]["total_ms"] >= 2 * 250 * 0.95
    assert "per attempt" in r008["title"]


def test_retries_to_a_second_backend_with_envoy_headers_and_counters(cli, tmp_path, result_validator) -> None:
    specs = [{"latency_ms": 2, "fail_rate": 0.5, "fail_status": 503}, {"latency_ms": 2}]
    with backends(tmp_path, specs) as bs, py_router(tmp_path, bs, retries=1, envoy_headers=True) as r:
        result = route(cli, tmp_path, r.url + "/predict", urls(bs), "--counter-path", "/stats",
                       validator=result_validator)
    assert result["metrics"]["distribution"]["header"] == "x-envoy-upstream-host"
    r005 = finding(result, "R005")
    assert r005["evidence"]["counted_from"] == "attempt-header"
    assert 1.1 < r005["evidence"]["amplification"] < 1.5
    counters = [b["counter_delta"] for b in result["metrics"]["backends"]]
    routed_attempts = sum(counters) - sum(p["requests"] for p in result["metrics"]["paths"][1:])
    assert routed_attempts == r005["evidence"]["backend_attempts"]  # the counters agree with the header


def test_haproxy_retry_on_503_seen_by_backend_counters(cli, tmp_path, result_validator) -> None:
    specs = [{"latency_ms": 2, "fail_rate": 0.5, "fail_status": 503}, {"latency_ms": 2}]
    with backends(tmp_path, specs) as bs:
        conf = haproxy_config(bs, retries=2, retry_on="conn-failure 503")
        with haproxy(conf, tmp_path) as r:
            result = route(cli, tmp_path, r.url + "/predict", urls(bs), "--counter-path", "/stats",
                           validator=result_validator)
    r005 = finding(result, "R005")
    assert r005["evidence"]["counted_from"] == "backend-counters"  # HAProxy names only the final server
    assert r005["evidence"]["amplification"] > 1.1
    assert result["metrics"]["paths"][0]["error_rate"] < 0.1  # the retries hid most 503s from the client
    assert finding(result, "R003")["evidence"]["backend"] == bs[0].url


def test_cold_backend(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 3, "cold_requests": 6, "cold_ms": 150}]) as bs:
        with py_router(tmp_path, bs) as r:
            result = route(cli, tmp_path, r.url + "/predict", urls(bs), validator=result_validator)
    r011 = finding(result, "R011")
    assert r011["evidence"]["backend"] == bs[0].url
    assert r011["evidence"]["first_p50_ms"] > 100  # 150 ms cold, 3 ms warm: relative, not a wall-clock bound
    assert r011["evidence"]["steady_p50_ms"] < 0.5 * r011["evidence"]["first_p50_ms"]


def test_router_not_listening_gives_partial_result(cli, tmp_path, result_validator) -> None:
    dead_router = f"http://127.0.0.1:{free_port()}/predict"
    with backends(tmp_path, [{"latency_ms": 2}]) as bs:
        result = route(cli, tmp_path, dead_router, urls(bs), "--duration", "0.5", validator=result_validator,
                       exit_code=3)  # the router could not be measured; the partial result is still written
    assert result["metrics"]["paths"][0]["errors"] == {"connect_refused": result["metrics"]["paths"][0]["requests"]}
    assert any(e["source"] == "route.router" for e in result["errors"])
    assert result["metrics"]["paths"][1]["ok"] > 0  # the backend was still measured directly


def test_router_and_backend_both_dead_exit_3_without_flooding(cli, tmp_path, result_validator) -> None:
    dead_router, dead_backend = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    result = route(cli, tmp_path, dead_router + "/predict", [dead_backend], "--duration", "2",
                   validator=result_validator, exit_code=3)
    paths = result["metrics"]["paths"]
    for path in paths:  # ~10 connects a second per path after the first slot, not thousands
        assert path["ok"] == 0 and set(path["errors"]) == {"connect_refused"}
        assert path["requests"] < 80, path
    sources = {e["source"] for e in result["errors"]}
    assert "route.router" in sources
    many = route(cli, tmp_path, dead_router + "/predict", [dead_backend], "--duration", "60", "--connects", "0",
                 exit_code=3)
    assert many["metrics"]["plan"]["measured_s"] < 20  # every path unreachable: it gave up early
    assert "route.unreachable" in {e["source"] for e in many["errors"]}


def test_router_answering_502_is_measured_not_unreachable(cli, tmp_path, result_validator) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    conf = f"""
    upstream app {{ server {dead[7:]}; }}
    server {{ listen 127.0.0.1:{{port}}; location / {{ proxy_pass http://app; }} }}
"""
    with nginx(conf, tmp_path) as r:
        result = route(cli, tmp_path, r.url + "/predict", [dead], "--duration", "0.5", validator=result_validator)
    assert set(result["metrics"]["paths"][0]["errors"]) == {"http_502"}  # exit 0: the router answered


HTTP_SERVER = """
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Quiet).serve_forever()  # as `python -m http.server`
"""


def test_connect_probes_do_not_overflow_a_small_accept_queue(cli, tmp_path, result_validator) -> None:
    # `python -m http.server` listens with a backlog of 5: 50 back-to-back connects with a 1 s timeout got
    # connect_timeouts (SYN retransmits) and a HIGH R007 against this healthy server
    with python_server(HTTP_SERVER, tmp_path, name="http_server") as a, python_server(
        HTTP_SERVER, tmp_path, name="http_server"
    ) as b:
        result = route(cli, tmp_path, a.url + "/", [b.url], "--duration", "1", "--connects", "50",
                       validator=result_validator)
    assert "R007" not in codes(result), result["findings"]
    connect = result["metrics"]["network"]["connect"]
    assert [c["attempts"] for c in connect] == [50, 50] and all(c["failures"] == {} for c in connect)
