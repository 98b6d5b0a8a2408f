"""Real backends and routers for the route tests: aiohttp backends, a small aiohttp router, nginx/HAProxy configs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from tests.support.servers import Running, python_server

BACKEND = r'''
"""An aiohttp model backend with configurable latency, failure rate, cold start and a request counter."""
import argparse
import asyncio
import random

from aiohttp import web

p = argparse.ArgumentParser()
p.add_argument("port", type=int)
p.add_argument("--latency-ms", type=float, default=1.0)
p.add_argument("--jitter-ms", type=float, default=0.0)
p.add_argument("--fail-rate", type=float, default=0.0)
p.add_argument("--fail-status", type=int, default=500)
p.add_argument("--cold-requests", type=int, default=0)
p.add_argument("--cold-ms", type=float, default=0.0)
p.add_argument("--health-status", type=int, default=200)
p.add_argument("--served-by", action="store_true", help="set X-Served-By on responses")
p.add_argument("--torch", action="store_true", help="run a tiny PyTorch model per request")
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()
rng = random.Random(args.seed)
state = {"requests": 0}
model = None
if args.torch:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()


async def predict(request):
    await request.read()
    state["requests"] += 1
    delay = args.latency_ms + rng.uniform(-args.jitter_ms, args.jitter_ms)
    if state["requests"] <= args.cold_requests:
        delay += args.cold_ms
    if delay > 0:
        await asyncio.sleep(delay / 1000.0)
    headers = {"X-Served-By": f"127.0.0.1:{args.port}"} if args.served_by else {}
    if rng.random() < args.fail_rate:
        return web.json_response({"error": "inference failed"}, status=args.fail_status, headers=headers)
    output = [0.0]
    if model is not None:
        import torch

        with torch.inference_mode():
            output = model(torch.ones(1, 16)).flatten().tolist()
    return web.json_response({"output": output}, headers=headers)


async def health(request):
    return web.json_response({"status": "ok" if args.health_status < 400 else "down"}, status=args.health_status)


async def stats(request):
    return web.json_response({"requests": state["requests"]})


app = web.Application()
app.router.add_route("*", "/predict", predict)
app.router.add_get("/health", health)
app.router.add_get("/stats", stats)
web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)
'''

FASTAPI_BACKEND = r'''
"""A FastAPI/uvicorn model backend: fixed latency, failure rate, a request counter."""
import argparse
import asyncio
import random

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

p = argparse.ArgumentParser()
p.add_argument("port", type=int)
p.add_argument("--latency-ms", type=float, default=1.0)
p.add_argument("--fail-rate", type=float, default=0.0)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--keep-alive-s", type=float, default=5.0)
args, _ = p.parse_known_args()
rng = random.Random(args.seed)
app = FastAPI()
state = {"requests": 0}


@app.api_route("/predict", methods=["GET", "POST"])
async def predict(request: Request):
    await request.body()
    state["requests"] += 1
    await asyncio.sleep(args.latency_ms / 1000.0)
    if rng.random() < args.fail_rate:
        return JSONResponse({"error": "inference failed"}, status_code=500)
    return {"output": [0.0]}


@app.get("/health")
async def health():
    return {"status": "ok"}


@app.get("/stats")
async def stats():
    return state


uvicorn.run(
    app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False,
    timeout_keep_alive=args.keep_alive_s,
)
'''

PY_ROUTER = r'''
"""A small aiohttp round-robin router with injected delay, a timeout, retries and upstream headers."""
import argparse
import asyncio
import itertools

import aiohttp
from aiohttp import web

p = argparse.ArgumentParser()
p.add_argument("port", type=int)
p.add_argument("--backend", action="append", default=[])
p.add_argument("--delay-ms", type=float, default=0.0)
p.add_argument("--timeout-s", type=float, default=30.0)
p.add_argument("--retries", type=int, default=0, help="extra attempts on 5xx or connect errors")
p.add_argument("--envoy-headers", action="store_true", help="x-envoy-upstream-host and x-envoy-attempt-count")
args = p.parse_args()
ring = itertools.cycle(args.backend)
session = None


async def on_startup(app):
    global session
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))


async def on_cleanup(app):
    await session.close()


async def health(request):
    return web.Response(text="ok")


async def forward(request):
    body = await request.read()
    if args.delay_ms:
        await asyncio.sleep(args.delay_ms / 1000.0)
    tried = []
    status, payload = 502, b"bad gateway"
    for _ in range(1 + args.retries):
        backend = next(ring)
        tried.append(backend.split("://", 1)[1])
        try:
            async with session.request(
                request.method, backend + request.path_qs, data=body,
                timeout=aiohttp.ClientTimeout(total=args.timeout_s),
            ) as resp:
                status, payload = resp.status, await resp.read()
        except asyncio.TimeoutError:
            status, payload = 504, b"upstream timeout"
            break
        except aiohttp.ClientError:
            status, payload = 502, b"upstream connect error"
            continue
        if status < 500:
            break
    if args.envoy_headers:
        headers = {"x-envoy-upstream-host": tried[-1], "x-envoy-attempt-count": str(len(tried))}
    else:
        headers = {"X-Upstream-Addr": ", ".join(tried)}
    return web.Response(status=status, body=payload, headers=headers)


app = web.Application()
app.on_startup.append(on_startup)
app.on_cleanup.append(on_cleanup)
app.router.add_get("/__router_health", health)
app.router.add_route("*", "/{tail:.*}", forward)
web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)
'''


def backend_args(
    *,
    latency_ms: float = 1.0,
    jitter_ms: float = 0.0,
    fail_rate: float = 0.0,
    fail_status: int = 500,
    cold_requests: int = 0,
    cold_ms: float = 0.0,
    health_status: int = 200,
    served_by: bool = False,
    torch: bool = False,
    seed: int = 0,
    fastapi: bool = False,
    keep_alive_s: float = 5.0,
) -> list[str]:
    """Command-line arguments of :data:`BACKEND`."""
    out = [
        f"--latency-ms={latency_ms}",
        f"--jitter-ms={jitter_ms}",
        f"--fail-rate={fail_rate}",
        f"--fail-status={fail_status}",
        f"--cold-requests={cold_requests}",
        f"--cold-ms={cold_ms}",
        f"--health-status={health_status}",
        f"--seed={seed}",
    ]
    if fastapi:
        out.append(f"--keep-alive-s={keep_alive_s}")
    if served_by:
        out.append("--served-by")
    if torch:
        out.append("--torch")
    return out


@contextmanager
def backends(tmp_path: Path, specs: Sequence[dict[str, object]]) -> Iterator[list[Running]]:
    """Start one backend per spec (keyword arguments of :func:`backend_args`), all stopped on exit.

    Backends are aiohttp servers, or FastAPI/uvicorn ones with ``fastapi=True``.
    """
    with ExitStack() as stack:
        running = [
            stack.enter_context(
                python_server(
                    FASTAPI_BACKEND if spec.get("fastapi") else BACKEND,
                    tmp_path,
                    args=backend_args(**spec),  # type: ignore[arg-type]
                    ready_path="/health",
                    name=f"backend{i}",
                )
            )
            for i, spec in enumerate(specs)
        ]
        yield running


@contextmanager
def py_router(
    tmp_path: Path,
    upstreams: Sequence[Running],
    *,
    delay_ms: float = 0.0,
    timeout_s: float = 30.0,
    retries: int = 0,
    envoy_headers: bool = False,
) -> Iterator[Running]:
    """The small Python router in front of ``upstreams``."""
    args = [f"--backend={u.url}" for u in upstreams]
    args += [f"--delay-ms={delay_ms}", f"--timeout-s={timeout_s}", f"--retries={retries}"]
    if envoy_headers:
        args.append("--envoy-headers")
    with python_server(PY_ROUTER, tmp_path, args=args, ready_path="/__router_health", name="pyrouter") as router:
        yield router


def nginx_config(
    upstreams: Sequence[Running],
    *,
    weights: Sequence[int] | None = None,
    max_fails: int = 1,
    fail_timeout_s: float = 10.0,
    next_upstream: str = "error timeout",
    next_upstream_tries: int = 0,
    read_timeout_s: float = 60.0,
    keepalive: int = 16,
) -> str:
    """An nginx ``http {}`` body: round-robin upstream (optionally weighted), passive health checks, retries."""
    servers = "\n".join(
        f"        server 127.0.0.1:{u.port}"
        + (f" weight={weights[i]}" if weights else "")
        + f" max_fails={max_fails} fail_timeout={max(1, round(fail_timeout_s))}s;"
        for i, u in enumerate(upstreams)
    )
    return f"""
    access_log {{prefix}}/access.log;
    upstream app {{
{servers}
        keepalive {keepalive};
    }}
    server {{
        listen 127.0.0.1:{{port}};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_next_upstream {next_upstream};
            proxy_next_upstream_tries {next_upstream_tries};
            proxy_read_timeout {int(read_timeout_s * 1000)}ms;
            proxy_connect_timeout 1s;
            add_header X-Upstream-Addr $upstream_addr always;
        }}
    }}
"""


def haproxy_config(
    upstreams: Sequence[Running],
    *,
    weights: Sequence[int] | None = None,
    server_timeout_s: float = 30.0,
    retries: int = 0,
    retry_on: str = "conn-failure empty-response response-timeout",
    check: bool = False,
) -> str:
    """An HAProxy body: round-robin backend (optionally weighted) that names the serving server in X-Served-By."""
    servers = "\n".join(
        f"    server b{i} 127.0.0.1:{u.port}" + (f" weight {weights[i]}" if weights else "")
        + (" check inter 500ms rise 1 fall 2" if check else "")
        for i, u in enumerate(upstreams)
    )
    return f"""
frontend fe
    bind 127.0.0.1:{{port}}
    log stdout format raw local0
    default_backend be
backend be
    balance roundrobin
{"    option httpchk GET /health" if check else ""}
    timeout server {int(server_timeout_s * 1000)}ms
    retries {retries}
    retry-on {retry_on}
    option redispatch 1
    http-response set-header X-Served-By %si:%sp
{servers}
"""


def envoy_config(
    upstreams: Sequence[str],
    *,
    admin_port: int,
    retry_on: str | None = None,
    num_retries: int = 2,
    max_connections: int | None = None,
    max_pending: int | None = None,
    health_path: str | None = None,
    hostnames: Sequence[str] | None = None,
    attempt_count_header: bool = False,
    outlier_5xx: int | None = None,
) -> str:
    """An Envoy bootstrap: a listener on ``{port}`` routing to ``upstreams`` (``host:port``), admin on loopback.

    Optional retry policy, circuit breaker, active health checks (HTTP GET ``health_path``), per-host hostnames
    (what ``x-envoy-upstream-host``-style headers and ``/clusters`` call them) and outlier detection.
    """
    endpoints = "\n".join(
        f"        - endpoint: {{{'hostname: ' + hostnames[i] + ', ' if hostnames else ''}address: "
        f"{{socket_address: {{address: {u.rsplit(':', 1)[0]}, port_value: {u.rsplit(':', 1)[1]}}}}}}}"
        for i, u in enumerate(upstreams)
    )
    retry = (f"\n                  retry_policy: {{retry_on: \"{retry_on}\", num_retries: {num_retries}}}"
             if retry_on else "")
    breaker = ""
    if max_connections is not None or max_pending is not None:
        breaker = (f"\n    circuit_breakers: {{thresholds: [{{max_connections: {max_connections or 1024}, "
                   f"max_pending_requests: {max_pending or 1024}}}]}}")
    health = ""
    if health_path:
        health = f"""
    health_checks:
    - timeout: 0.5s
      interval: 0.2s
      unhealthy_threshold: 1
      healthy_threshold: 1
      http_health_check: {{path: {health_path}}}"""
    outlier = ""
    if outlier_5xx:
        outlier = (f"\n    outlier_detection: {{consecutive_5xx: {outlier_5xx}, interval: 0.5s, base_ejection_time: 30s,"
                   " max_ejection_percent: 100}")
    return f"""
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}}}
static_resources:
  listeners:
  - name: ingress
    address: {{socket_address: {{address: 127.0.0.1, port_value: {{port}}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: app
              domains: ["*"]
              include_attempt_count_in_response: {str(attempt_count_header).lower()}
              routes:
              - match: {{prefix: "/"}}
                route:
                  cluster: app{retry}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: app
    type: STATIC
    connect_timeout: 0.25s{breaker}{health}{outlier}
    load_assignment:
      cluster_name: app
      endpoints:
      - lb_endpoints:
{endpoints}
"""


def haproxy_stats_config(
    upstreams: Sequence[Running],
    *,
    stats_port: int,
    maxconn: int | None = None,
    maxqueue: int | None = None,
    queue_timeout_ms: int = 2000,
    check: bool = False,
) -> str:
    """An HAProxy body like :func:`haproxy_config` (servers ``b0``, ``b1``, ...; ``X-Served-By: <server name>``), with
    its stats page (``/stats``, ``;csv``) and Prometheus exporter (``/metrics``) on ``stats_port``; ``maxconn`` and
    ``maxqueue`` per server make a queue that fills. (The runtime API goes in ``global``: ``haproxy(...,
    global_extra=f"stats socket ipv4@127.0.0.1:{port} level operator")``.)"""
    limits = (f" maxconn {maxconn}" if maxconn else "") + (f" maxqueue {maxqueue}" if maxqueue else "")
    servers = "\n".join(
        f"    server b{i} 127.0.0.1:{u.port}{limits}" + (" check inter 300ms rise 1 fall 1" if check else "")
        for i, u in enumerate(upstreams)
    )
    return f"""
frontend stats
    bind 127.0.0.1:{stats_port}
    http-request use-service prometheus-exporter if {{ path /metrics }}
    stats enable
    stats uri /stats
    stats refresh 0
frontend fe
    bind 127.0.0.1:{{port}}
    log stdout format raw local0
    default_backend be
backend be
    balance roundrobin
{"    option httpchk GET /health" if check else ""}
    timeout queue {queue_timeout_ms}ms
    http-response set-header X-Served-By %s
{servers}
"""
