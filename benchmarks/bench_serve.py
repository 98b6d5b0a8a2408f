"""Overhead of infradoctor.serve's ASGI middleware per request (goal < 50 us), in-process and through uvicorn.

In-process: the same request is sent straight into an ASGI app (no network, no server) with the middleware off and
on, in alternating slices within one run; the overhead is the difference of the fastest slices' mean request times
(the slices least disturbed by other processes; the difference of the median slices is printed too). Variants: middleware with two stages; with Prometheus metrics; with metrics and the JSON log line (handler
that drops records). Both a raw ASGI app and a FastAPI app are measured.

Loop-lag monitor: a busy event loop (yields with a little Python work) timed with and without the monitor watching
(paired slices), and the CPU the monitor uses on an idle loop.

End to end: two uvicorn servers (same FastAPI app, with and without the middleware) driven alternately by `hey`
(the peer load generator) on loopback; the ratio of throughputs and the difference of mean latencies are printed.

    python benchmarks/run.py serve [--slices 10] [--requests 2000] [--no-e2e]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from infradoctor.procs import free_port, stop_process, wait_for_http  # noqa: E402
from infradoctor.serve import ACCESS_LOGGER, LoopLagMonitor, ServeMetrics, TimingMiddleware, stage  # noqa: E402

GOAL_US = 50.0

SCOPE: dict[str, Any] = {
    "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
    "path": "/predict", "raw_path": b"/predict", "query_string": b"", "root_path": "",
    "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"content-length", b"2"),
                (b"user-agent", b"bench")],
    "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000),
}


async def raw_app(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    with stage("preprocess"):
        pass
    with stage("inference"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


def fastapi_app(middleware: dict[str, Any] | None) -> Any:
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/predict")
    async def predict() -> dict[str, int]:
        with stage("preprocess"):
            pass
        with stage("inference"):
            pass
        return {"y": 1}

    if middleware is not None:
        app.add_middleware(TimingMiddleware, **middleware)
    return app


async def drive(app: Any, n: int) -> float:
    """Seconds for ``n`` sequential requests sent straight into ``app``."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Any) -> None:
        return None

    start = time.perf_counter()
    for _ in range(n):
        await app(dict(SCOPE), receive, send)
    return time.perf_counter() - start


def in_process(label: str, make: Callable[[dict[str, Any] | None], Any], variants: dict[str, dict[str, Any]],
               slices: int, per_slice: int) -> dict[str, float]:
    apps = {"off": make(None), **{name: make(kw) for name, kw in variants.items()}}
    loop = asyncio.new_event_loop()
    try:
        for app in apps.values():  # warm up: imports, caches, label children
            loop.run_until_complete(drive(app, 200))
        per_request: dict[str, list[float]] = {name: [] for name in apps}
        for _ in range(slices):
            for name, app in apps.items():
                per_request[name].append(loop.run_until_complete(drive(app, per_slice)) / per_slice * 1e6)
    finally:
        loop.close()
    # The fastest slice of each variant is the one least disturbed by other processes (as timeit takes the min).
    off = min(per_request["off"])
    print(f"{label}: middleware off {off:.1f} us/request (median slice {statistics.median(per_request['off']):.1f})")
    overheads = {}
    for name in variants:
        on = min(per_request[name])
        median_overhead = statistics.median(per_request[name]) - statistics.median(per_request["off"])
        overheads[name] = on - off
        print(f"{label}: {name:22} {on:.1f} us/request  overhead {on - off:+.1f} us (median slices "
              f"{median_overhead:+.1f})  ratio {on / off:.3f}  "
              f"(goal < {GOAL_US:.0f} us: {'ok' if on - off < GOAL_US else 'MISSED'})")
    return overheads


async def busy_loop(iterations: int) -> float:
    """Seconds for ``iterations`` yields through the event loop, each with a little Python work."""
    start = time.perf_counter()
    for i in range(iterations):
        sum(range(20 + i % 3))
        await asyncio.sleep(0)
    return time.perf_counter() - start


def loop_monitor_cost(slices: int, per_slice: int) -> float:
    """Relative slowdown of a busy event loop while a LoopLagMonitor watches it (alternating slices)."""
    loop = asyncio.new_event_loop()
    monitor = LoopLagMonitor()
    times: dict[str, list[float]] = {"off": [], "on": []}
    try:
        loop.run_until_complete(busy_loop(per_slice))
        for _ in range(slices):
            times["off"].append(loop.run_until_complete(busy_loop(per_slice)))
            monitor.start(loop)
            times["on"].append(loop.run_until_complete(busy_loop(per_slice)))
            monitor.stop()
    finally:
        loop.close()
    # Adjacent slices see similar interference from other processes: the median of paired ratios is the estimate.
    ratio = statistics.median(on / off for on, off in zip(times["on"], times["off"], strict=True))
    per_yield_us = min(times["off"]) / per_slice * 1e6
    print(f"loop-lag monitor: busy loop {per_yield_us:.2f} us per yield; with the monitor x{ratio:.3f} "
          f"({(ratio - 1) * 100:+.1f}%, median of {slices} paired slices; fastest slices "
          f"x{min(times['on']) / min(times['off']):.3f})")
    return ratio


def loop_monitor_cpu(seconds: float) -> float:
    """CPU the monitor itself uses (watchdog wake-ups and callbacks), in % of one core, on an idle loop."""
    loop = asyncio.new_event_loop()
    try:
        start_cpu = time.process_time()
        loop.run_until_complete(asyncio.sleep(seconds))
        idle = time.process_time() - start_cpu
        monitor = LoopLagMonitor().start(loop)
        start_cpu = time.process_time()
        loop.run_until_complete(asyncio.sleep(seconds))
        watched = time.process_time() - start_cpu
        evidence = monitor.stop()
    finally:
        loop.close()
    percent = max(0.0, watched - idle) / seconds * 100
    print(f"loop-lag monitor: {evidence.beats} callbacks in {seconds:g} s cost {percent:.3f}% of a core "
          f"(idle loop without it: {idle / seconds * 100:.3f}%)")
    return percent


SERVER = """
import sys
import uvicorn
from fastapi import FastAPI
from infradoctor.serve import ServeMetrics, TimingMiddleware, stage

app = FastAPI()

@app.get("/predict")
async def predict() -> dict:
    with stage("preprocess"):
        pass
    with stage("inference"):
        pass
    return {"y": 1}

if sys.argv[2] == "on":
    app.add_middleware(TimingMiddleware, metrics=ServeMetrics(), metrics_path="/metrics")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def hey(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    out = subprocess.run(["hey", "-n", str(requests), "-c", str(concurrency), url], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    avg = float(re.search(r"Average:\s+([\d.]+) secs", out).group(1))  # type: ignore[union-attr]
    return rps, avg * 1000


def end_to_end(requests: int, rounds: int) -> None:
    if shutil.which("hey") is None:
        print("e2e: hey is not installed; skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "server.py"
        script.write_text(textwrap.dedent(SERVER))
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        servers = {}
        try:
            for mode in ("off", "on"):
                port = free_port()
                proc = subprocess.Popen([sys.executable, str(script), str(port), mode], env=env)
                servers[mode] = (proc, f"http://127.0.0.1:{port}/predict")
                if not wait_for_http(servers[mode][1], timeout=60, proc=proc):
                    print(f"e2e: server {mode} did not start")
                    return
            results: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
            for mode in ("off", "on"):
                hey(servers[mode][1], 200, 4)  # warm up
            for _ in range(rounds):
                for mode in ("off", "on"):
                    results[mode].append(hey(servers[mode][1], requests, 4))
        finally:
            for proc, _ in servers.values():
                stop_process(proc, grace_s=3.0)
    rps = {m: statistics.median(r[0] for r in v) for m, v in results.items()}
    lat = {m: statistics.median(r[1] for r in v) for m, v in results.items()}
    print(f"e2e uvicorn+hey (c=4, {requests} requests x {rounds} rounds): off {rps['off']:.0f} req/s "
          f"{lat['off']:.2f} ms, on {rps['on']:.0f} req/s {lat['on']:.2f} ms")
    print(f"e2e: throughput ratio on/off {rps['on'] / rps['off']:.3f}; mean latency +{lat['on'] - lat['off']:.3f} ms"
          f" (per-request CPU cost at c=4: {(1 / rps['on'] - 1 / rps['off']) * 1e6:+.1f} us)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--slices", type=int, default=20)
    parser.add_argument("--per-slice", type=int, default=500)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-e2e", action="store_true")
    args = parser.parse_args(argv)

    access = logging.getLogger(ACCESS_LOGGER)
    access.addHandler(logging.NullHandler())
    access.propagate = False

    access.setLevel(logging.INFO)  # lines at DEBUG are dropped before formatting; lines at INFO are formatted

    def variants() -> dict[str, dict[str, Any]]:
        return {
            "stages (log off)": {"log_level": logging.DEBUG},
            "stages+metrics": {"metrics": ServeMetrics(), "log_level": logging.DEBUG},
            "stages+metrics+log": {"metrics": ServeMetrics(), "log_level": logging.INFO},
        }

    raw = in_process("raw ASGI", lambda kw: raw_app if kw is None else TimingMiddleware(raw_app, **kw), variants(),
                     args.slices, args.per_slice)
    fast = in_process("FastAPI ", fastapi_app, variants(), args.slices, max(1, args.per_slice // 2))
    worst = max(*raw.values(), *fast.values())
    loop_monitor_cost(max(3, args.slices // 2), 100000)
    loop_monitor_cpu(3.0)
    if not args.no_e2e:
        end_to_end(args.requests, args.rounds)
    print(f"ratio worst in-process overhead / goal: {worst / GOAL_US:.2f} ({worst:.1f} us of {GOAL_US:.0f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
