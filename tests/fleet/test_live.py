"""``infradoctor fleet`` on a real Prometheus scraping real exporters on loopback.

Three GPU nodes, each a recorded dcgm-exporter exposition served as recorded (gpu-b's with Xid 48 and HW slowdown
+ HW thermal throttling set), a real node_exporter (Debian's, scraped once per node), real HAProxy with its
built-in Prometheus exporter and real Envoy's /stats/prometheus, both in front of one healthy and one failing
backend, and requests through both. Everything starts on free loopback ports and stops at the end.
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
from tests.fleet.servers import envoy_argv, node_exporter, process, prometheus
from tests.support.servers import haproxy, python_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BACKEND = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
STATUS = int(sys.argv[2])
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        body = b"ok" if STATUS == 200 else b"down"
        self.send_response(STATUS if self.path != "/health" else 200)
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
        node_argv, node_port = node_exporter(tmp_path)
        stack.enter_context(process(node_argv, tmp_path, "node_exporter", f"http://127.0.0.1:{node_port}/metrics"))
        dcgm = {name: stack.enter_context(dcgm_exporter(name, SICK if name == "gpu-b" else None))
                for name in ("gpu-a", "gpu-b", "gpu-c")}
        targets = [("dcgm", f"127.0.0.1:{port}", 1.0, f"{name}:9400") for name, port in dcgm.items()]
        targets += [("node", f"127.0.0.1:{node_port}", 1.0, f"{name}:9100") for name in dcgm]
        targets += [("haproxy", f"127.0.0.1:{metrics_port}", 1.0, "router-1:8404"),
                    ("envoy", f"127.0.0.1:{admin}", 1.0, "router-2:9901")]
        prom = stack.enter_context(prometheus(tmp_path, scrape=targets))
        assert wait_until(lambda: _targets_up(prom.url) == len(targets), timeout=30), "targets not all up"
        time.sleep(2)  # counters have a first sample before the traffic
        statuses = [_get(f"{ha.url}/v1/generate") for _ in range(30)]
        statuses += [_get(f"http://127.0.0.1:{envoy_port}/v1/generate") for _ in range(30)]
        assert 200 in statuses and 503 in statuses
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
    routers = {(r["router"], r["upstream"]): r for r in metrics["routers"]}
    envoy = routers[("envoy", "models")]
    assert envoy["requests"] >= 30 and envoy["retries"] > 0
    ha_models = routers[("haproxy", "models")]
    assert ha_models["requests"] > 0 and ha_models["errors_5xx"] > 0 and ha_models["members_max"] == 2
    assert any(f["code"] == "R005" and f["location"]["file"] == "router-2 envoy" for f in data["findings"])
    rows = {r["node"]: r for r in metrics["nodes"]}
    assert rows["gpu-a"]["gpus"] == 1 and rows["gpu-a"]["cpu_util_pct"] is not None
