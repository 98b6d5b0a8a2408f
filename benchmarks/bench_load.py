"""Load generator: throughput vs wrk and hey, memory over a long run, open-loop tail accuracy.

1. Throughput. A local nginx answers `return 200 "hello"` (one worker, no access log). infradoctor's closed loop,
   `wrk -t1` and `hey` run against it in turn, interleaved over `--reps` rounds, with the same connection count
   (`--connections`, 32) for `--duration` seconds each, each in a fresh process of its own; infradoctor times every
   request into its histogram.
   infradoctor and wrk run back to back in alternating order each round, and the headline is the median of the
   per-round ratios (runs that shared the machine's state); goal >= 1.0x wrk and >= 2x hey (ratio of medians).
   The single-process engine is the headline; the same with header capture on (the CLI's default, reading
   Server-Timing), with the compiled fast path off (`INFRADOCTOR_LOAD_COMPILED=0`: the Python one) and a run over
   `--processes` generator processes (merged histograms) are printed beside it. Each tool's CPU per request
   (rusage; for infradoctor over the point alone) and the nginx worker's busy share during its runs tell whether
   the generator or the server set the rate: with nginx near 100% of its core, no generator can go faster.

2. Memory. A child process runs one closed-loop point of `--long-requests` requests (default 1M; the goal is 10M)
   against the same nginx and samples its RSS as it goes; the peak RSS and the growth per million requests are
   printed, with the RSS extrapolated to 10M requests (goal < 200 MB).

3. Tail accuracy. A local aiohttp server answers each request after S = 10 ms (`asyncio.sleep`) and blocks its
   event loop for 1 s every 5 s. An open-loop run at a fixed rate (constant arrivals) for a whole number of
   periods (`--tail-seconds`, 20) measures p99 from the intended send time.

   Expected value: in any window that spans whole periods, a fraction f = 1/5 of arrivals fall into a stall. An
   arrival u seconds into a 1 s stall waits (1 - u) s for the loop, then S: with arrivals uniform in the stall its
   latency is uniform on (S, 1 s + S]. The other 80% take S. The p99 is the value exceeded by 1% of all requests,
   i.e. by 1%/20% = 5% of the stalled ones: p99 = S + (1 - 0.05) * 1 s = S + 950 ms = 960 ms (S measured as
   the server's unstalled median, so its scheduling overhead is included). Goal: |measured/expected - 1| <= 10%.
   The same server under the closed loop (c=2) shows what coordinated omission hides: only the requests in flight
   when a stall begins see it, so its p99 comes out near S.

Usage: `python benchmarks/run.py load [--duration 3] [--reps 3] [--long-requests 1000000] [--tail-seconds 20]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from infradoctor.load import RequestSpec, run_point  # noqa: E402
from infradoctor.load.client import COMPILED_ENV  # noqa: E402
from infradoctor.procs import free_port, port_open, stop_process, wait_for_http, wait_until  # noqa: E402

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/cb; proxy_temp_path {prefix}/px; fastcgi_temp_path {prefix}/fc;
    uwsgi_temp_path {prefix}/uw; scgi_temp_path {prefix}/sc;
    keepalive_requests 100000000;
    server {{ listen 127.0.0.1:{port}; location / {{ return 200 "hello"; }} }}
}}
"""

STALL_SERVER = r"""
import asyncio, sys, time
from aiohttp import web

SERVICE_S = 0.010

async def handle(request):
    await asyncio.sleep(SERVICE_S)
    return web.Response(text="ok")

async def stall_every(app):
    async def loop():
        start = time.monotonic()
        k = 1
        while True:
            await asyncio.sleep(max(0.0, start + 5.0 * k - time.monotonic()))
            time.sleep(1.0)  # the whole server stalls for 1 s every 5 s
            k += 1
    app["stall"] = asyncio.create_task(loop())

app = web.Application()
app.on_startup.append(stall_every)
app.add_routes([web.get("/", handle)])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""

FLOOR_CHILD = r"""
# The floor for any Python generator on uvloop + httptools: a closed loop that reads one clock and appends one
# latency per response and writes the next request, nothing else (no histogram, no error handling, no timeouts).
import asyncio, sys, time
from array import array
import httptools, uvloop

host, port, conns, duration = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
request = f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
latencies = array("d")
append, clock = latencies.append, time.perf_counter
state = {"stop": False}

class Conn(asyncio.Protocol):
    def __init__(self):
        self.parser = httptools.HttpResponseParser(self)
        self.t = 0.0
    def connection_made(self, transport):
        self.transport = transport
        self.t = clock()
        transport.write(request)
    def data_received(self, data):
        self.parser.feed_data(data)
    def on_message_complete(self):
        now = clock()
        append(now - self.t)
        if not state["stop"]:
            self.t = now
            self.transport.write(request)

async def main():
    loop = asyncio.get_running_loop()
    for _ in range(conns):
        await loop.create_connection(Conn, host, port)
    del latencies[:]
    await asyncio.sleep(duration)
    state["stop"] = True
    print(len(latencies) / duration)

uvloop.run(main())
"""

MEMORY_CHILD = r"""
import json, sys, time, psutil
sys.path.insert(0, sys.argv[4])
from infradoctor.load import RequestSpec, run_point
proc = psutil.Process()
samples = []
def progress(p):
    samples.append((p.completed, proc.memory_info().rss))
spec = RequestSpec(sys.argv[1], capture_headers=())
point = run_point(spec, concurrency=int(sys.argv[3]), requests=int(sys.argv[2]), duration_s=None, timeout_s=30,
                  on_progress=progress, progress_interval_s=1.0)
samples.append((point.completed, proc.memory_info().rss))
import resource
print(json.dumps({"completed": point.completed, "throughput_rps": point.throughput_rps,
                  "p99_ms": point.latency.summary_ms().get("p99"), "samples": samples,
                  "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


CPU_US: dict[str, list[float]] = {}
"""Generator CPU (user + system, rusage) per request, microseconds, per tool (for infradoctor over the point alone:
interpreter start-up and imports excluded, as wrk has none to speak of)."""
SERVER_BUSY: dict[str, list[float]] = {}
"""Share of one core the nginx worker was busy during each tool's runs (infradoctor's children meter it over their
point alone; wrk's start-up is negligible)."""
NGINX_WORKER: list[Any] = []


def metered(name: str, run: Callable[[], float | None]) -> float | None:
    """``run()`` (wrk) with the nginx worker's busy share recorded under ``name``."""
    worker = NGINX_WORKER[0] if NGINX_WORKER else None
    t0 = time.perf_counter()
    c0 = sum(worker.cpu_times()[:2]) if worker is not None else 0.0
    out = run()
    if worker is not None and out:
        busy = (sum(worker.cpu_times()[:2]) - c0) / (time.perf_counter() - t0)
        SERVER_BUSY.setdefault(name, []).append(busy)
    return out


def which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin:/sbin")


def start_nginx(tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = which("nginx")
    if binary is None:
        raise SystemExit("nginx is not installed")
    port = free_port()
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=tmp, port=port))
    proc = subprocess.Popen(
        [binary, "-p", str(tmp), "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    if not wait_until(lambda: port_open("127.0.0.1", port), timeout=10, alive=lambda: proc.poll() is None):
        raise SystemExit("nginx did not start")
    return proc, port


def run_wrk(url: str, connections: int, duration: float) -> float | None:
    binary = which("wrk")
    if binary is None:
        return None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [binary, "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", url],
        capture_output=True,
        text=True,
        timeout=duration + 30,
    ).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    count = re.search(r"(\d+) requests in", out)
    if match and count and int(count.group(1)):
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        CPU_US.setdefault("wrk", []).append(cpu / int(count.group(1)) * 1e6)
    return float(match.group(1)) if match else None


def run_hey(url: str, connections: int, duration: float) -> float | None:
    binary = which("hey")
    if binary is None:
        return None
    out = subprocess.run(
        [binary, "-c", str(connections), "-z", f"{max(1, round(duration))}s", url],
        capture_output=True,
        text=True,
        timeout=duration + 60,
    ).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    return float(match.group(1)) if match else None


OURS_CHILD = r"""
import json, os, resource, sys, time
import psutil
sys.path.insert(0, sys.argv[6])
from infradoctor.load import RequestSpec, run_point
from infradoctor.load.client import compiled_fast_path
from infradoctor.load.histogram import _numpy

url, connections, duration, headers, processes = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1", int(sys.argv[5])
spec = RequestSpec(url) if headers else RequestSpec(url, capture_headers=())
if __name__ == "__main__":
    _numpy()  # imported before the CPU count starts, as wrk has nothing to import
    server = psutil.Process(int(os.environ["BENCH_SERVER_PID"])) if os.environ.get("BENCH_SERVER_PID") else None
    before = resource.getrusage(resource.RUSAGE_SELF)
    server_cpu, t0 = (sum(server.cpu_times()[:2]) if server else 0.0), time.perf_counter()
    point = run_point(spec, concurrency=connections, duration_s=duration, timeout_s=10, processes=processes)
    after = resource.getrusage(resource.RUSAGE_SELF)
    busy = (sum(server.cpu_times()[:2]) - server_cpu) / (time.perf_counter() - t0) if server else None
    cpu_s = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(json.dumps({"throughput_rps": point.throughput_rps, "completed": point.completed,
                      "timed": point.latency.count, "compiled": compiled_fast_path(), "cpu_s": cpu_s,
                      "server_busy": busy}))
"""


COMPILED: list[bool] = []
"""Whether each infradoctor run had the compiled fast path (``infradoctor.load._fastpath``)."""


def run_ours(
    url: str, args: argparse.Namespace, *, headers: bool = False, processes: int = 1, compiled: bool = True
) -> float:
    """infradoctor's closed loop in a fresh process of its own, as `infradoctor load` runs (and as wrk, hey and the
    floor run): no state left over from earlier runs in this process. ``compiled=False``: the Python fast path."""
    child = [str(args.connections), str(args.duration), "1" if headers else "0", str(processes), str(ROOT / "src")]
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:  # (a file: spawn re-imports main)
        script.write(OURS_CHILD)
    try:
        env = dict(os.environ)
        if NGINX_WORKER:  # the child meters the server over its point alone (not over its start-up)
            env["BENCH_SERVER_PID"] = str(NGINX_WORKER[0].pid)
        if not compiled:
            env[COMPILED_ENV] = "0"
        out = subprocess.run(
            [sys.executable, script.name, url, *child],
            capture_output=True,
            text=True,
            timeout=args.duration + 60,
            env=env,
        )
    finally:
        os.unlink(script.name)
    if out.returncode != 0:
        raise SystemExit(f"infradoctor run failed: {out.stderr[-2000:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert data["timed"] == data["completed"], "every request is timed into the histogram"
    if compiled:
        COMPILED.append(bool(data["compiled"]))
    if processes == 1 and data.get("server_busy") is not None:
        name = "python_path" if not compiled else "headers" if headers else "ours"
        SERVER_BUSY.setdefault(name, []).append(data["server_busy"])
    if processes == 1 and not headers and data["completed"]:
        CPU_US.setdefault("infradoctor" if compiled else "python_path", []).append(
            data["cpu_s"] / data["completed"] * 1e6
        )
    return float(data["throughput_rps"])


def run_floor(url: str, connections: int, duration: float) -> float | None:
    """Responses per second of FLOOR_CHILD (None when uvloop/httptools are missing or it fails)."""
    host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
    out = subprocess.run(
        [sys.executable, "-c", FLOOR_CHILD, host, port, str(connections), str(duration)],
        capture_output=True,
        text=True,
        timeout=duration + 30,
    )
    try:
        return float(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def throughput(url: str, args: argparse.Namespace) -> dict[str, float | None]:
    runs: dict[str, list[float]] = {"infradoctor": [], "infradoctor_headers": [], "infradoctor_processes": []}
    runs.update(wrk=[], hey=[], floor=[], python_path=[])
    paired: list[float] = []
    paired_headers: list[float] = []
    for rep in range(args.reps):
        # infradoctor and wrk back to back, in alternating order, so that each round's ratio compares runs that
        # shared the machine's state (this machine is shared and its speed drifts by +-15% within a minute)
        order = ("ours", "wrk", "headers") if rep % 2 == 0 else ("headers", "wrk", "ours")
        got: dict[str, float | None] = {}
        for name in order:
            if name == "wrk":
                got[name] = metered("wrk", lambda: run_wrk(url, args.connections, args.duration))
            else:
                got[name] = run_ours(url, args, headers=name == "headers")
        procs = run_ours(url, args, processes=args.processes) if args.processes > 1 else None
        python_path = run_ours(url, args, compiled=False)
        runs["python_path"].append(python_path)
        h = run_hey(url, args.connections, args.duration)
        floor = run_floor(url, args.connections, args.duration)
        if floor:
            runs["floor"].append(floor)
        ours, ours_headers, w = got["ours"], got["headers"], got["wrk"]
        assert ours is not None and ours_headers is not None
        runs["infradoctor"].append(ours)
        runs["infradoctor_headers"].append(ours_headers)
        if procs is not None:
            runs["infradoctor_processes"].append(procs)
        if w:
            runs["wrk"].append(w)
            paired.append(ours / w)
            paired_headers.append(ours_headers / w)
        if h:
            runs["hey"].append(h)
        extra = f", {args.processes} processes {procs:,.0f}" if procs is not None else ""
        print(
            f"  round {rep + 1}: infradoctor {ours:,.0f} (headers on {ours_headers:,.0f}{extra}, "
            f"python fast path {python_path:,.0f})  "
            f"wrk {w or 0:,.0f}  hey {h or 0:,.0f}  python floor {floor or 0:,.0f} req/s"
            + (f"  ratio to wrk {ours / w:.2f}" if w else ""),
            flush=True,
        )
    med = {name: statistics.median(v) if v else None for name, v in runs.items()}
    print(
        f"throughput (median of {args.reps}, -c {args.connections}): infradoctor {med['infradoctor']:,.0f}, "
        f"with header capture {med['infradoctor_headers']:,.0f}, wrk {med['wrk'] or 0:,.0f}, "
        f"hey {med['hey'] or 0:,.0f} req/s"
    )
    if med["wrk"] and paired:
        print(
            f"ratio infradoctor/wrk = {statistics.median(paired):.2f} median of per-round ratios "
            f"(range {min(paired):.2f}-{max(paired):.2f}; ratio of medians {med['infradoctor'] / med['wrk']:.2f})"
            f"  (goal >= 1.0)"
        )
        print(
            f"ratio infradoctor/wrk with header capture on (the CLI's default) = {statistics.median(paired_headers):.2f}"
        )
    if med["infradoctor_processes"] and med["wrk"]:
        print(
            f"ratio infradoctor({args.processes} processes)/wrk = {med['infradoctor_processes'] / med['wrk']:.2f}"
            f"  (hey uses every core; wrk -t1 one)"
        )
    path = "compiled" if all(COMPILED) else "Python (not built)" if not any(COMPILED) else "mixed"
    print(
        f"fast path in these runs: {path}; the Python fast path (INFRADOCTOR_LOAD_COMPILED=0) reached "
        f"{med['python_path'] or 0:,.0f} req/s = {(med['python_path'] or 0) / (med['wrk'] or math.nan):.2f}x wrk"
    )
    if CPU_US.get("wrk") and CPU_US.get("infradoctor"):
        cpu = {name: statistics.median(v) for name, v in CPU_US.items()}
        print(
            f"generator CPU per request (user+system, median): infradoctor {cpu['infradoctor']:.2f} us "
            f"(Python fast path {cpu.get('python_path', math.nan):.2f} us), wrk {cpu['wrk']:.2f} us; "
            f"ratio wrk/infradoctor = {cpu['wrk'] / cpu['infradoctor']:.2f} (above 1: infradoctor spends less)"
        )
    if SERVER_BUSY:
        busy = ", ".join(f"{name} {statistics.median(v):.0%}" for name, v in SERVER_BUSY.items())
        print(
            f"nginx worker busy (share of one core, median) during: {busy}; near 100% the server, not the generator, "
            f"sets the req/s, and the throughput ratio can only be ~1"
        )
    if med["hey"]:
        print(f"ratio infradoctor/hey = {med['infradoctor'] / med['hey']:.2f}  (goal >= 2.0)")
    if med["floor"]:
        print(
            f"ratio infradoctor/python floor = {med['infradoctor'] / med['floor']:.2f}, "
            f"python floor/wrk = {med['floor'] / (med['wrk'] or math.nan):.2f}  (the floor: a bare uvloop+httptools "
            f"closed loop with one clock read per response, no histogram or error handling)"
        )
    return med


def fastpath_ab(url: str, args: argparse.Namespace) -> None:
    """The compiled fast path against the Python one: ``--fastpath-rounds`` alternating rounds on the same nginx.

    Each round runs both (C first in odd rounds, Python first in even ones), each in a fresh process for
    ``--duration`` seconds at ``--connections``; per run the generator's CPU per request (user + system over the
    point) and its throughput. The verdict takes the per-round ratios (compiled / Python): the gain is real when
    every round agrees on its sign and the median gain exceeds the rounds' own spread (the median absolute
    deviation of the ratios), i.e. it stands out of the noise this machine makes.
    """
    rows: list[dict[str, float]] = []
    for rep in range(args.fastpath_rounds):
        got: dict[str, tuple[float, float]] = {}
        for compiled in ((True, False) if rep % 2 == 0 else (False, True)):
            before = len(CPU_US.get("infradoctor" if compiled else "python_path", []))
            rps = run_ours(url, args, compiled=compiled)
            cpu = CPU_US["infradoctor" if compiled else "python_path"][before]
            got["c" if compiled else "py"] = (rps, cpu)
        row = {"c_rps": got["c"][0], "py_rps": got["py"][0], "c_cpu": got["c"][1], "py_cpu": got["py"][1]}
        rows.append(row)
        print(
            f"  fastpath round {rep + 1}: compiled {row['c_rps']:,.0f} req/s {row['c_cpu']:.2f} us/req, "
            f"python {row['py_rps']:,.0f} req/s {row['py_cpu']:.2f} us/req  "
            f"(cpu ratio {row['c_cpu'] / row['py_cpu']:.3f}, rps ratio {row['c_rps'] / row['py_rps']:.3f})",
            flush=True,
        )
    for key, unit, lower_better in (("cpu", "us/req", True), ("rps", "req/s", False)):
        ratios = [r[f"c_{key}"] / r[f"py_{key}"] for r in rows]
        med = statistics.median(ratios)
        mad = statistics.median(abs(x - med) for x in ratios)
        gain = (1.0 - med) if lower_better else (med - 1.0)
        same_sign = all((x < 1.0) == lower_better for x in ratios) if gain > 0 else False
        real = same_sign and gain > mad
        print(
            f"fastpath {key}: compiled {statistics.median(r[f'c_{key}'] for r in rows):,.2f} vs python "
            f"{statistics.median(r[f'py_{key}'] for r in rows):,.2f} {unit} (medians of {len(rows)}); per-round ratio "
            f"median {med:.3f} (range {min(ratios):.3f}-{max(ratios):.3f}, MAD {mad:.3f}); gain {gain:+.1%}: "
            + ("real (every round agrees, beyond the spread)" if real else "within noise")
        )


def memory(url: str, args: argparse.Namespace) -> None:
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, url, str(args.long_requests), str(args.connections), str(ROOT / "src")],
        capture_output=True,
        text=True,
        timeout=args.long_requests / 2000 + 120,
    )
    if out.returncode != 0:
        print("memory run failed:", out.stderr[-2000:])
        return
    data = json.loads(out.stdout.strip().splitlines()[-1])
    samples = data["samples"]
    peak_mb = data["peak_rss_kb"] / 1024.0
    # growth from the first sample past 10% of the run to the end, per million requests
    start = next((s for s in samples if s[0] >= 0.1 * data["completed"]), samples[0])
    end = samples[-1]
    growth = (end[1] - start[1]) / 1e6 / max(1, end[0] - start[0]) * 1e6
    projected = end[1] / 1e6 + growth * max(0.0, (10_000_000 - end[0]) / 1e6)
    print(
        f"memory: {data['completed']:,} requests at {data['throughput_rps']:,.0f} req/s, peak RSS {peak_mb:.1f} MB, "
        f"growth {growth:.2f} MB per million requests, projected RSS at 10M requests {projected:.1f} MB "
        f"(goal < 200 MB)"
    )


def tail_accuracy(tmp: Path, args: argparse.Namespace) -> None:
    port = free_port()
    script = tmp / "stall_server.py"
    script.write_text(textwrap.dedent(STALL_SERVER))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        if not wait_for_http(url, timeout=30, proc=proc):
            print("tail: stall server did not start")
            return
        # the server's unstalled service time, measured between stalls (short closed-loop probe)
        probe = run_point(
            RequestSpec(url, capture_headers=()), concurrency=1, requests=40, duration_s=None, timeout_s=5
        )
        service_ms = probe.latency.percentiles_us([50.0])[0] / 1000.0
        expected_ms = service_ms + 950.0
        point = run_point(
            RequestSpec(url, capture_headers=()),
            rate=args.tail_rate,
            arrivals="constant",
            duration_s=args.tail_seconds,
            timeout_s=10,
        )
        measured = point.latency.percentiles_us([99.0])[0] / 1000.0
        assert point.latency_from_send is not None
        from_send = point.latency_from_send.percentiles_us([99.0])[0] / 1000.0
        closed = run_point(
            RequestSpec(url, capture_headers=()), concurrency=2, duration_s=args.tail_seconds, timeout_s=10
        )
        closed_p99 = closed.latency.percentiles_us([99.0])[0] / 1000.0
        error = measured / expected_ms - 1.0
        print(
            f"tail: service {service_ms:.1f} ms, open loop {args.tail_rate:g} req/s for {args.tail_seconds:g} s "
            f"({point.completed} requests): p99 {measured:.0f} ms (from send {from_send:.0f} ms), expected "
            f"{expected_ms:.0f} ms, error {error:+.1%} (goal within 10%); closed loop c=2 p99 {closed_p99:.0f} ms "
            f"(coordinated omission)"
        )
    finally:
        stop_process(proc, grace_s=2.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per throughput run")
    parser.add_argument("--reps", type=int, default=3, help="interleaved rounds of the throughput comparison")
    parser.add_argument("--connections", type=int, default=32, help="connections for every tool")
    parser.add_argument("--processes", type=int, default=2, help="also run infradoctor with this many processes")
    parser.add_argument("--long-requests", type=int, default=1_000_000, help="requests of the memory run (goal 10M)")
    parser.add_argument("--tail-seconds", type=float, default=20.0, help="open-loop tail run (a multiple of 5 s)")
    parser.add_argument("--tail-rate", type=float, default=100.0, help="open-loop rate of the tail run")
    parser.add_argument("--fastpath-rounds", type=int, default=7, help="alternating rounds of compiled vs Python")
    parser.add_argument(
        "--skip", action="append", default=[], choices=("throughput", "fastpath", "memory", "tail")
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    with tempfile.TemporaryDirectory(prefix="bench_load_") as tmp_name:
        tmp = Path(tmp_name)
        nginx, port = start_nginx(tmp)
        url = f"http://127.0.0.1:{port}/"
        NGINX_WORKER[:] = psutil.Process(nginx.pid).children()[:1]
        try:
            if "throughput" not in args.skip:
                throughput(url, args)
            if "fastpath" not in args.skip:
                fastpath_ab(url, args)
            if "memory" not in args.skip:
                memory(url, args)
        finally:
            stop_process(nginx, grace_s=3.0)
        if "tail" not in args.skip:
            tail_accuracy(tmp, args)
    return 0


if __name__ == "__main__":
    start = time.perf_counter()
    code = main()
    print(f"done in {time.perf_counter() - start:.1f} s")
    sys.exit(code)
