"""infradoctor fleet: 1,000 nodes x 8 GPUs over a 1 h window from a real Prometheus (goal < 30 s, < 500 MB RSS).

The history is backfilled with `promtool tsdb create-blocks-from openmetrics` from the test fleet's generator
(tests/fleet/history.py: the recorded dcgm-exporter label set, node_exporter and kube-state-metrics; a few nodes
sick in known ways) and cached under benchmarks/out/. infradoctor runs as a fresh process; its wall time, peak RSS,
query count and bytes fetched are printed. Peer, in the same run: the raw pull a tool without server-side
aggregation makes (one range query per GPU metric over the window at the same step), measured for two metrics and
extrapolated to the eleven the fleet's history holds.

    python benchmarks/run.py fleet [--nodes 1000] [--gpus 8] [--rebuild]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from tests.fleet.history import SLIM_GPU, Fleet, write_openmetrics  # noqa: E402

from infradoctor.fleet.prom import PrometheusClient  # noqa: E402

WALL_GOAL_S = 30.0
RSS_GOAL_MB = 500.0
CACHE = ROOT / "benchmarks" / "out"
MAX_CACHE_AGE_S = 20 * 86400.0  # Prometheus keeps 30 days here; rebuild well before


def build(fleet: Fleet, where: Path) -> None:
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    source = where / "history.om"
    started = time.perf_counter()
    samples = write_openmetrics(fleet, source)
    print(f"history: {samples:,} samples, {source.stat().st_size / 1e6:.0f} MB OpenMetrics in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(where / "tsdb")],
                   check=True, capture_output=True, timeout=3600)
    print(f"promtool create-blocks: {time.perf_counter() - started:.0f} s", flush=True)
    source.unlink()
    (where / "meta.json").write_text(json.dumps({"start": fleet.start, "end": fleet.end, "nodes": fleet.nodes,
                                                 "gpus": fleet.gpus}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rebuild", action="store_true", help="rebuild the backfilled TSDB")
    args = parser.parse_args(argv)
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("prometheus/promtool not installed (apt-get install -y prometheus)", file=sys.stderr)
        return 2
    where = CACHE / f"fleet-{args.nodes}x{args.gpus}"
    meta_path = where / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() and not args.rebuild else None
    if meta is None or time.time() - meta["end"] > MAX_CACHE_AGE_S:
        end = float(int(time.time()) - 1800)
        build(Fleet(start=end - 3600, end=end, nodes=args.nodes, gpus=args.gpus, interval_s=60.0, before_s=600.0,
                    slim=True, cpus=2), where)
        meta = json.loads(meta_path.read_text())
    start, end = meta["start"], meta["end"]
    port_probe = subprocess.run([sys.executable, "-c", "from infradoctor.procs import free_port; print(free_port())"],
                                capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                                check=True)
    port = int(port_probe.stdout)
    config = where / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    log = (where / "prometheus.log").open("wb")
    prom = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={where / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        client = PrometheusClient(url, timeout_s=5)
        for _ in range(600):
            if client.build_info()[1] is None:
                break
            time.sleep(0.2)
        out = Path(tempfile.mkdtemp(prefix="idr-bench-")) / "fleet.json"
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "INFRADOCTOR_HOME": str(out.parent)}
        started = time.perf_counter()
        errors = out.parent / "stderr.txt"
        with errors.open("wb") as err:
            child = subprocess.Popen([sys.executable, "-m", "infradoctor", "fleet", "--prometheus", url, "--from",
                                      f"{start:.0f}", "--to", f"{end:.0f}", "--json", str(out), "--no-store",
                                      "--quiet", "--timeout", "120"], env=env, stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(child.pid, 0)  # this child's own peak RSS, not promtool's
        wall = time.perf_counter() - started
        rss_mb = usage.ru_maxrss / 1024
        if os.waitstatus_to_exitcode(status) not in (0, 1):
            print(errors.read_text()[-3000:], file=sys.stderr)
            return 1
        result = json.loads(out.read_text())
        head = result["metrics"]["headline"]
        codes: dict[str, int] = {}
        for finding in result["findings"]:
            codes[finding["code"]] = codes.get(finding["code"], 0) + 1
        print(f"infradoctor fleet: {head['nodes']} nodes, {head['gpus']} GPUs, window {head['window_s']:.0f} s: "
              f"{wall:.1f} s wall, peak RSS {rss_mb:.0f} MB, "
              f"{head['queries']} queries, {head['bytes_fetched'] / 1e6:.1f} MB fetched, findings {codes}, "
              f"errors {len(result['errors'])}")
        step = result["metrics"]["window"]["step_s"]
        peer = PrometheusClient(url, timeout_s=300, max_response_bytes=1 << 31)
        peer_bytes = peer_s = 0.0
        measured = SLIM_GPU[:2]
        for metric in measured:
            t0 = time.perf_counter()
            answer = peer.query_range(metric, start, end, step)
            peer_s += time.perf_counter() - t0
            if answer.failure is not None:
                print(f"peer raw pull of {metric} failed: {answer.failure.message}")
        peer_bytes = peer.stats.bytes_fetched
        scale = len(SLIM_GPU) / len(measured)
        print(f"peer raw pull: {peer_bytes / 1e6:.1f} MB in {peer_s:.1f} s for {len(measured)} metrics; "
              f"x{scale:.1f} for all {len(SLIM_GPU)} GPU metrics = {peer_bytes * scale / 1e6:.0f} MB, "
              f"{peer_s * scale:.0f} s (extrapolated)")
        print(f"ratio bytes fetched infradoctor/raw-pull: {head['bytes_fetched'] / (peer_bytes * scale):.3f}")
        print(f"ratio wall infradoctor/raw-pull: {wall / (peer_s * scale):.2f}")
        load = os.getloadavg()
        print(f"machine load average during the run: {load[0]:.1f} (1 min), {load[1]:.1f} (5 min) on "
              f"{os.cpu_count()} CPUs (other work on the machine slows Prometheus and infradoctor alike)")
        ok = wall < WALL_GOAL_S and rss_mb < RSS_GOAL_MB
        print(f"goal wall < {WALL_GOAL_S:g} s: {'met' if wall < WALL_GOAL_S else 'MISSED'}; "
              f"goal RSS < {RSS_GOAL_MB:g} MB: {'met' if rss_mb < RSS_GOAL_MB else 'MISSED'}")
        return 0 if ok else 1
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=30)
        except subprocess.TimeoutExpired:
            prom.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
