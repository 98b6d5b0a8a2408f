"""route: router-added latency under backend drift, interleaved (infradoctor route) vs sequential wrk runs.

The classic manual method is two load runs one after the other: wrk through the router, then wrk straight to the
backend, and compare the medians. When the backend's latency drifts during the measurement (warm-up, GC, a
neighbour on the node), the two runs see different backends and the difference is wrong. ``infradoctor route``
interleaves both paths in short slots, so drift cancels.

Setup: one aiohttp backend whose latency is ``5 ms + slope * seconds since its first request``, behind nginx
(upstream keep-alive) on loopback. A control run with no drift gives each method's estimate of nginx's own
overhead (well under a millisecond on loopback); the drift run (default 3 ms/s) shows how far each method moves
away from its control. Both methods use 4 connections and the same total time. Prints each estimate and the ratio
of the errors (wrk error / infradoctor error; > 1 means infradoctor is closer).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from infradoctor.procs import free_port, port_open, stop_process, wait_for_http, wait_until

BACKEND = """
import asyncio, sys, time
from aiohttp import web
slope = float(sys.argv[2])
start = []
async def predict(request):
    now = time.monotonic()
    if not start:
        start.append(now)
    await asyncio.sleep((5.0 + slope * (now - start[0])) / 1000.0)
    return web.Response(text="ok")
async def health(request):
    return web.Response(text="ok")
app = web.Application()
app.router.add_get("/predict", predict)
app.router.add_get("/health", health)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""

NGINX = """
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/cb; proxy_temp_path {prefix}/px; fastcgi_temp_path {prefix}/fc;
    uwsgi_temp_path {prefix}/uw; scgi_temp_path {prefix}/sc;
    upstream app {{ server 127.0.0.1:{backend}; keepalive 16; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection "";
            add_header X-Upstream-Addr $upstream_addr always;
        }}
    }}
}}
"""


def wrk_p50_ms(url: str, seconds: float, connections: int) -> float:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency", url],
        capture_output=True, text=True, timeout=seconds + 30, check=True,
    ).stdout
    match = re.search(r"^\s*50%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    if not match:
        raise RuntimeError(f"no p50 in wrk output:\n{out}")
    value, unit = float(match.group(1)), match.group(2)
    return value / 1000.0 if unit == "us" else value * 1000.0 if unit == "s" else value


class Stack:
    """A drifting backend behind nginx, started fresh for each measurement."""

    def __init__(self, tmp: Path, slope: float) -> None:
        self.tmp, self.slope = tmp, slope

    def __enter__(self) -> Stack:
        self.backend_port, self.port = free_port(), free_port()
        script = self.tmp / "backend.py"
        script.write_text(textwrap.dedent(BACKEND))
        self.backend = subprocess.Popen([sys.executable, str(script), str(self.backend_port), str(self.slope)])
        prefix = self.tmp / f"nginx_{self.port}"
        prefix.mkdir()
        conf = prefix / "nginx.conf"
        conf.write_text(NGINX.format(prefix=prefix, backend=self.backend_port, port=self.port))
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.nginx = subprocess.Popen([nginx, "-p", str(prefix), "-c", str(conf)])
        ok = wait_for_http(f"http://127.0.0.1:{self.backend_port}/health", timeout=30, proc=self.backend)
        ok = ok and wait_until(lambda: port_open("127.0.0.1", self.port), timeout=20)
        if not ok:
            self.__exit__()
            raise RuntimeError("backend or nginx did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        stop_process(self.nginx, grace_s=3)
        stop_process(self.backend, grace_s=3)

    @property
    def router(self) -> str:
        return f"http://127.0.0.1:{self.port}/predict"

    @property
    def direct(self) -> str:
        return f"http://127.0.0.1:{self.backend_port}/predict"


def infradoctor_added_ms(stack: Stack, seconds: float, connections: int, tmp: Path) -> tuple[float, float, float]:
    from infradoctor.cli import main as cli_main

    out = tmp / f"route_{stack.port}.json"
    code = cli_main([
        "route", "--router", stack.router, "--backend", f"http://127.0.0.1:{stack.backend_port}",
        "--duration", str(seconds), "--concurrency", str(connections), "--connects", "0",
        "--json", str(out), "--quiet", "--no-store",
    ])
    if code != 0:
        raise RuntimeError(f"infradoctor route exited {code}")
    added = json.loads(out.read_text())["metrics"]["attribution"]["added_p50_ms"]
    return added["value"], added["ci_low"], added["ci_high"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_route", description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0, help="total measurement time per method")
    parser.add_argument("--slope", type=float, default=3.0, help="backend drift in ms per second")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="control+drift pairs per method")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None or (shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists()):
        print("skipped: needs wrk and nginx")
        return 0
    errors: dict[str, list[float]] = {"infradoctor": [], "wrk": []}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for repeat in range(args.repeats):
            estimates: dict[str, dict[str, float]] = {}
            for label, slope in (("control", 0.0), ("drift", args.slope)):
                with _fresh(tmp, label, slope) as stack:
                    value, low, high = infradoctor_added_ms(stack, args.seconds, args.connections, tmp)
                with _fresh(tmp, label + "_wrk", slope) as stack:
                    routed = wrk_p50_ms(stack.router, args.seconds / 2, args.connections)
                    direct = wrk_p50_ms(stack.direct, args.seconds / 2, args.connections)
                estimates[label] = {"infradoctor": value, "wrk": routed - direct}
                print(f"#{repeat + 1} {label:8} infradoctor added p50 {value:6.2f} ms [95% CI {low:.2f}, {high:.2f}]"
                      f"   wrk router-then-direct p50 difference {routed - direct:6.2f} ms "
                      f"(router {routed:.2f}, direct {direct:.2f})")
            for method in errors:
                errors[method].append(abs(estimates["drift"][method] - estimates["control"][method]))
    mean_id = sum(errors["infradoctor"]) / len(errors["infradoctor"])
    mean_wrk = sum(errors["wrk"]) / len(errors["wrk"])
    print(f"mean drift error over {args.repeats} repeats: infradoctor {mean_id:.2f} ms, wrk sequential {mean_wrk:.2f} ms")
    # errors below 0.1 ms are within either method's resolution on a shared host
    print(f"ratio wrk_error/infradoctor_error {max(mean_wrk, 0.1) / max(mean_id, 0.1):.1f}x")
    return 0


def _fresh(tmp: Path, label: str, slope: float) -> Stack:
    folder = tmp / f"{label}_{free_port()}"
    folder.mkdir()
    return Stack(folder, slope)


if __name__ == "__main__":
    sys.exit(main())
