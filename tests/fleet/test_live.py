"""``infradoctor fleet`` on a real Prometheus scraping real exporters on loopback.

Three GPU nodes, each a recorded dcgm-exporter exposition served as recorded (gpu-b's with Xid 48 and HW slowdown
+ HW thermal throttling set), a real node_exporter (Debian's, scraped once per node), real HAProxy with its
built-in Prometheus exporter and real Envoy's /stats/prometheus, both in front of one healthy and one failing
backend, a second real Envoy whose only backend answers predictions but fails its active health check (panic
mode), and a real nginx read by a real nginx-prometheus-exporter (Debian's), with requests through all four.
Everything starts on free loopback ports and stops at the end.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from infradoctor.procs import wait_until
from tests.conftest import validate_result
from tests.fleet.dcgm_exporter import dcgm_exporter
from tests.fleet.servers import envoy_argv, nginx_exporter, node_exporter, process, prometheus
from tests.support.servers import haproxy, nginx, python_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BACKEND = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
STATUS = int(sys.argv[2])
HEALTH = int(sys.argv[3]) if len(sys.argv) > 3 else 200
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        body = b"ok" if STATUS == 200 else b"down"
        self.send_response(STATUS if self.path != "/health" else HEALTH)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

HAPROXY = """
frontend web
    bind 127.0.0.1:{port}
    default_backend models
frontend metrics
    bind 127.0.0.1:{metrics}
    http-request use-service prometheus-exporter if {{ path /metrics }}
backend models
    balance roundrobin
    retries 2
    option redispatch
    server ok 127.0.0.1:{ok}
    server bad 127.0.0.1:{bad}
"""

NGINX = """
    server { listen 127.0.0.1:{port}; location /stub { stub_status; } location / { return 200 "ok"; } }
"""

SICK = {"DCGM_FI_DEV_XID_ERRORS": 48, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x48}


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _targets_up(url: str) -> int:
    query = urllib.parse.urlencode({"query": "sum(up)"})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=5) as response:  # noqa: S310
            result = json.loads(response.read())["data"]["result"]
    except (OSError, ValueError, KeyError):
        return 0
    return int(float(result[0]["value"][1])) if result else 0


def test_real_exporters_scraped_by_a_real_prometheus(tmp_path: Path, cli) -> None:
    from infradoctor.procs import free_port

    with contextlib.ExitStack() as stack:
        ok = stack.enter_context(python_server(BACKEND, tmp_path, args=("200",), name="ok"))
        bad = stack.enter_context(python_server(BACKEND, tmp_path, args=("503",), ready_path="/health", name="bad"))
        metrics_port = free_port()
        body = HAPROXY.replace("{metrics}", str(metrics_port)).replace("{ok}", str(ok.port)).replace(
            "{bad}", str(bad.port)).replace("{{", "{").replace("}}", "}")
        ha = stack.enter_context(haproxy(body, tmp_path))
        argv, envoy_port, admin = envoy_argv(tmp_path, [ok.port, bad.port])
        stack.enter_context(process(argv, tmp_path, "envoy", f"http://127.0.0.1:{admin}/ready"))
        # answers predictions, fails its health check: Envoy marks it failed and routes to it in panic mode
        sick = stack.enter_context(python_server(BACKEND, tmp_path, args=("200", "503"), name="sick"))
        argv, panic_port, panic_admin = envoy_argv(tmp_path, [sick.port], health_path="/health")
        stack.enter_context(process(argv, tmp_path, "envoy-panic", f"http://127.0.0.1:{panic_admin}/ready"))
        web = stack.enter_context(nginx(NGINX, tmp_path))
        exporter_argv, exporter_port = nginx_exporter(f"{web.url}/stub")
        stack.enter_context(process(exporter_argv, tmp_path, "nginx_exporter",
                                    f"http://127.0.0.1:{exporter_port}/metrics"))
        node_argv, node_port = node_exporter(tmp_path)
        stack.enter_context(process(node_argv, tmp_path, "node_exporter", f"http://127.0.0.1:{node_port}/metrics"))
        dcgm = {name: stack.enter_context(dcgm_exporter(name, SICK if name == "gpu-b" else None))
                for name in ("gpu-a", "gpu-b", "gpu-c")}
        targets = [("dcgm", f"127.0.0.1:{port}", 1.0, f"{name}:9400") for name, port in dcgm.items()]
        targets += [("node", f"127.0.0.1:{node_port}", 1.0, f"{name}:9100") for name in dcgm]
        targets += [("haproxy", f"127.0.0.1:{metrics_port}", 1.0, "router-1:8404"),
                    ("envoy", f"127.0.0.1:{admin}", 1.0, "router-2:9901"),
                    ("envoy", f"127.0.0.1:{panic_admin}", 1.0, "router-3:9901"),
                    ("nginx", f"127.0.0.1:{exporter_port}", 1.0, "router-4:9113")]
        prom = stack.enter_context(prometheus(tmp_path, scrape=targets))
        assert wait_until(lambda: _targets_up(prom.url) == len(targets), timeout=30), "targets not all up"
        time.sleep(2)  # counters have a first sample before the traffic
        statuses = [_get(f"{ha.url}/v1/generate") for _ in range(30)]
        statuses += [_get(f"http://127.0.0.1:{envoy_port}/v1/generate") for _ in range(30)]
        assert 200 in statuses and 503 in statuses
        assert [_get(f"http://127.0.0.1:{panic_port}/v1/generate") for _ in range(20)] == [200] * 20
        assert [_get(f"{web.url}/v1/generate") for _ in range(25)] == [200] * 25
        time.sleep(6)  # a few scrapes after the traffic
        out = tmp_path / "fleet.json"
        done = cli("fleet", "--prometheus", prom.url, "--window", "30s", "--step", "1s", "--json", str(out))
    assert done.exit_code == 0, done.stderr
    data = json.loads(out.read_text())
    validate_result(data)
    gpu_findings = {(f["code"], f["location"]["file"]) for f in data["findings"] if f["code"] in ("N001", "N003")}
    assert gpu_findings == {("N001", "gpu-b GPU 0"), ("N003", "gpu-b GPU 0")}
    xid = next(f for f in data["findings"] if f["code"] == "N001")
    assert xid["evidence"]["xid"] == 48
    metrics = data["metrics"]
    coverage = {c["source"]: c for c in metrics["coverage"]}
    assert coverage["dcgm-exporter"]["nodes_seen"] == 3 and coverage["node_exporter"]["nodes_seen"] == 3
    routers = {(r["node"], r["router"], r["upstream"]): r for r in metrics["routers"]}
    envoy = routers[("router-2", "envoy", "models")]
    assert envoy["requests"] >= 30 and envoy["retries"] > 0
    ha_models = routers[("router-1", "haproxy", "models")]
    assert ha_models["requests"] > 0 and ha_models["errors_5xx"] > 0 and ha_models["members_max"] == 2
    assert any(f["code"] == "R005" and f["location"]["file"] == "router-2 envoy" for f in data["findings"])
    # upstream health: HAProxy's server "bad" answers 503 to everything while HAProxy holds it UP
    found = {(f["code"], f["location"]["file"], f["evidence"].get("router_name")): f for f in data["findings"]}
    assert found[("R003", "router-1 haproxy", "bad")]["evidence"]["errors"] == ha_models["errors_5xx"]
    assert ("R010", "router-1 haproxy", "bad") in found  # held healthy while its requests fail
    assert not any(code == "R013" for code, where, _ in found if where == "router-1 haproxy")  # the 5xx were bad's
    assert ("R003", "router-1 haproxy", "ok") not in found
    # every host of router-3's cluster failed Envoy's active health check: panic routing, only Envoy's word shows it
    panic = next(f for f in data["findings"] if f["code"] == "R010" and f["location"]["file"] == "router-3 envoy")
    assert panic["evidence"]["panic_requests"] >= 20 and panic["evidence"]["membership_healthy"] == 0
    assert panic["evidence"]["membership_total"] == 1
    failing = next(f for f in data["findings"] if f["code"] == "R003" and f["location"]["file"] == "router-3 envoy")
    assert "1 of 1 hosts unhealthy" in failing["title"] and "panic mode" in failing["title"]
    assert routers[("router-2", "envoy", "models")]["panic_requests"] == 0  # router-2's cluster: healthy members, no panic
    panicking = next(r for r in metrics["routers"] if r["node"] == "router-3")
    assert panicking["healthy_min"] == 0 and panicking["panic_requests"] >= 20
    # nginx through its exporter: requests and connections, nothing dropped, nothing to find
    web_row = next(r for r in metrics["routers"] if r["router"] == "nginx")
    assert web_row["node"] == "router-4" and web_row["upstream"] == "-" and web_row["requests"] >= 25
    assert web_row["connections_dropped"] == 0 and web_row["connections_active_max"] >= 1
    assert not any(f["location"]["file"] == "router-4 nginx" for f in data["findings"])
    rows = {r["node"]: r for r in metrics["nodes"]}
    assert rows["gpu-a"]["gpus"] == 1 and rows["gpu-a"]["cpu_util_pct"] is not None
