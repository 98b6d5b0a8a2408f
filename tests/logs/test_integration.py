"""Real nginx and HAProxy in front of real Python backends that fail, stall and refuse; their logs go to `logs`.

Router timeouts are 1 s so the stalls are short. Each test records when it caused each kind of failure and checks
the incidents `infradoctor logs` finds in the routers' own logs: kind, count, upstream and time window.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from infradoctor.logs.formats.layout import NGINX_UPSTREAM_FULL
from infradoctor.procs import free_port, wait_until
from tests.support.servers import haproxy, nginx, python_server

pytestmark = pytest.mark.integration

BACKEND = """
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path.endswith("/fail"):
            code, body = 500, b"model crashed\\n"
        elif self.path.endswith("/slow"):
            time.sleep(2.5)
            code, body = 200, b"late\\n"
        elif self.path.endswith("/busy"):
            time.sleep(0.2)
            code, body = 200, b"busy\\n"
        else:
            code, body = 200, b"ok\\n"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\\n")

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - loopback
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def fire(url: str, count: int, parallel: int = 1) -> tuple[float, float, list[int]]:
    """Send ``count`` GETs; returns (start, end, statuses) with wall-clock times."""
    start = time.time()
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        statuses = list(pool.map(get, [url] * count))
    return start, time.time(), statuses


def analyze(cli, tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "logs.json"
    run = cli("logs", *args, "--json", str(out), "--no-store", "-q")
    assert run.exit_code == 0, run.stderr
    return json.loads(out.read_text())


def incidents(data: dict, kind: str, file_suffix: str) -> list[dict]:
    """Incidents of a kind with lines in a file (an incident spans every file that logged its failures)."""
    return [i for i in data["metrics"]["incidents"]
            if i["kind"] == kind and any(f.endswith(file_suffix) for f in i["files"] or [i["file"]])]


def near_timeout(inferred_ms: float, configured_ms: float) -> bool:
    """An inferred router timeout matches the configured one (1 s): a timer never fires early (5% for the log's
    rounding) and fires late only by scheduling delay, well short of the 2.5 s the /slow backend takes, so an
    inference that read the backend's latency still fails."""
    return configured_ms * 0.95 <= inferred_ms < configured_ms + 250.0


def within(incident: dict, window: tuple[float, float]) -> bool:
    from datetime import datetime

    start = datetime.fromisoformat(incident["start"].replace("Z", "+00:00")).timestamp()
    end = datetime.fromisoformat(incident["end"].replace("Z", "+00:00")).timestamp()
    return window[0] - 1 <= start <= end <= window[1] + 1


def test_nginx_failures_become_incidents(cli, tmp_path: Path, result_validator) -> None:
    with python_server(BACKEND, tmp_path, name="backend") as backend:
        dead, dead2 = free_port(), free_port()  # nothing listens on these
        config = f"""
    log_format upstream_full '{NGINX_UPSTREAM_FULL}';
    upstream good {{ server 127.0.0.1:{backend.port}; }}
    upstream dead {{ server 127.0.0.1:{dead} max_fails=0; }}
    upstream mixed {{ server 127.0.0.1:{dead} max_fails=0; server 127.0.0.1:{backend.port} max_fails=0; }}
    upstream flaky {{ server 127.0.0.1:{dead} max_fails=1 fail_timeout=30s;
                      server 127.0.0.1:{dead2} max_fails=1 fail_timeout=30s; }}
    server {{
        listen 127.0.0.1:{{port}};
        access_log {{prefix}}/access.log upstream_full;
        proxy_connect_timeout 1s;
        proxy_read_timeout 1s;
        location /dead/ {{ proxy_pass http://dead; }}
        location /mixed/ {{ proxy_pass http://mixed; }}
        location /flaky/ {{ proxy_pass http://flaky; }}
        location / {{ proxy_pass http://good; }}
    }}
"""
        with nginx(config, tmp_path) as router:
            base = router.url
            ok = fire(f"{base}/ok", 10)
            failed = fire(f"{base}/fail", 6)
            slow = fire(f"{base}/slow", 3, parallel=3)
            refused = fire(f"{base}/dead/x", 5)
            mixed = fire(f"{base}/mixed/ok", 8)
            flaky = fire(f"{base}/flaky/x", 4)
            prefix = router.log.parent
            wait_until(lambda: len(router.log_text().splitlines()) >= 36, timeout=10)
        access, error = prefix / "access.log", prefix / "error.log"
    assert ok[2] == [200] * 10 and failed[2] == [500] * 6 and slow[2] == [504] * 3
    assert refused[2] == [502] * 5 and mixed[2] == [200] * 8 and flaky[2] == [502] * 4

    data = analyze(cli, tmp_path, str(access), str(error))
    result_validator(data)
    files = {Path(f["file"]).name: f for f in data["metrics"]["files"]}
    assert files["access.log"]["format"] == "nginx" and files["access.log"]["parsed"] == 36
    assert files["error.log"]["format"] == "nginx-error"
    good, dead_addr, dead2_addr = f"127.0.0.1:{backend.port}", f"127.0.0.1:{dead}", f"127.0.0.1:{dead2}"

    # the access log's 504s and the error log's "upstream timed out" are the same 3 failures: one incident
    timeouts = incidents(data, "upstream_timeout", "access.log")
    assert [(i["subject"], i["count"], i["failures"]) for i in timeouts] == [(good, 6, 3)]
    assert within(timeouts[0], slow[:2]) and {Path(f).name for f in timeouts[0]["files"]} == {"access.log",
                                                                                            "error.log"}
    refused = {i["subject"]: (i["count"], i["failures"]) for i in incidents(data, "upstream_connect_error", ".log")}
    # access log: /dead/ 5 times, and the first /flaky/ request (its last server is the subject); error log: every
    # refused try (/dead/ 5, /mixed/ 4 of 8 round-robin tries, /flaky/ 1 each): failures are the error log's
    assert refused == {dead_addr: (5 + 10, 10), dead2_addr: (1 + 1, 1)}
    connect = incidents(data, "upstream_connect_error", "error.log")
    assert any("Connection refused" in e for i in connect for e in i["examples"])

    no_live = incidents(data, "no_healthy_upstream", "access.log")
    assert [(i["subject"], i["count"], i["failures"]) for i in no_live] == [("flaky", 6, 3)]
    assert within(no_live[0], flaky[:2])

    codes = {f["code"]: f for f in data["findings"]}
    assert {"R005", "R006", "R007", "R008"} <= set(codes)
    assert near_timeout(codes["R008"]["evidence"]["inferred_timeout_ms"], 1000)
    # round robin sends half of /mixed/ to the dead port first; the first /flaky/ request tried two servers
    assert codes["R005"]["evidence"]["retried_requests"] == 4 + 1
    upstreams = {u["upstream"]: u for u in data["metrics"]["upstreams"]}
    assert upstreams[good]["errors"] == 6 + 3 and upstreams[good]["requests"] == 10 + 6 + 3 + 8
    assert upstreams[dead_addr]["error_rate"] == 1.0
    # "no live upstreams" logs the group's name (flaky) as $upstream_addr: no server was tried
    assert data["metrics"]["attempts"] == {"0": 3, "1": 28, "2": 5} and "flaky" not in upstreams


def slow_upload(port: int, seconds: float = 0.6, parts: int = 6) -> int:
    """POST a body one byte at a time over ``seconds``: a slow client. Returns the status."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {parts}\r\nConnection: close\r\n\r\n"
                     .encode())
        for _ in range(parts):
            time.sleep(seconds / parts)
            sock.sendall(b"x")
        response = b""
        while chunk := sock.recv(4096):
            response += chunk
    return int(response.split(b" ", 2)[1])


def test_nginx_slow_clients_show_as_router_time(cli, tmp_path: Path) -> None:
    with python_server(BACKEND, tmp_path, name="backend") as backend:
        config = f"""
    log_format upstream_full '{NGINX_UPSTREAM_FULL}';
    server {{
        listen 127.0.0.1:{{port}};
        access_log {{prefix}}/access.log upstream_full;
        location / {{ proxy_pass http://127.0.0.1:{backend.port}; }}
    }}
"""
        with nginx(config, tmp_path) as router:
            fast = fire(f"{router.url}/ok", 4)
            with ThreadPoolExecutor(max_workers=3) as pool:
                slow = list(pool.map(lambda _: slow_upload(router.port), range(3)))
            wait_until(lambda: len(router.log_text().splitlines()) >= 7, timeout=10)
            access = router.log
    assert fast[2] == [200] * 4 and slow == [200] * 3
    data = analyze(cli, tmp_path, str(access), "--min-requests", "3")
    split = data["metrics"]["router_split"]
    # nginx buffers the body before it calls the backend: the slow upload is the router's time, not upstream time
    # (an upstream time that included the 600 ms upload would be >= 600: half of it still separates the two)
    assert split["router_p99_ms"] >= 400 and split["upstream_p99_ms"] < 300
    r001 = [f for f in data["findings"] if f["code"] == "R001"]
    assert r001 and r001[0]["evidence"]["added_p99_ms"] >= 400


HAPROXY_BODY = """
frontend fe
    bind 127.0.0.1:{port}
    use_backend be_dead if {{ path_beg /dead }}
    use_backend be_down if {{ path_beg /down }}
    use_backend be_one if {{ path_beg /one }}
    default_backend be_llm

backend be_llm
    timeout server 1s
    server srv1 127.0.0.1:{backend}

backend be_dead
    retries 1
    timeout connect 300ms
    server srv2 127.0.0.1:{dead}

backend be_down
    server srv3 127.0.0.1:{dead} disabled

backend be_one
    server srv4 127.0.0.1:{backend} maxconn 1
"""


def test_haproxy_failures_become_incidents(cli, tmp_path: Path, result_validator) -> None:
    with python_server(BACKEND, tmp_path, name="backend") as backend:
        dead = free_port()
        body = HAPROXY_BODY.replace("{backend}", str(backend.port)).replace("{dead}", str(dead))
        body = body.replace("{{", "{").replace("}}", "}")
        with haproxy(body, tmp_path) as router:
            base = router.url
            ok = fire(f"{base}/ok", 8)
            failed = fire(f"{base}/fail", 4)
            slow = fire(f"{base}/slow", 3, parallel=3)
            refused = fire(f"{base}/dead/x", 3)
            down = fire(f"{base}/down/x", 2)
            queued = fire(f"{base}/one/busy", 6, parallel=6)  # one at a time: the others wait in HAProxy's queue
            log = router.log
            # HAProxy writes a line when the session closes: wait (bounded) until all 27 are there
            wait_until(lambda: len(router.log_text().splitlines()) >= 27, timeout=10)
    assert ok[2] == [200] * 8 and failed[2] == [500] * 4 and slow[2] == [504] * 3
    assert refused[2] == [503] * 3 and down[2] == [503] * 2 and queued[2] == [200] * 6

    data = analyze(cli, tmp_path, str(log))
    result_validator(data)
    row = data["metrics"]["files"][0]
    # dontlognull: the readiness probe is not logged; HAProxy's own start-up messages are free text
    assert row["format"] == "haproxy" and row["formats"]["haproxy"] == 26
    timeouts = incidents(data, "upstream_timeout", ".log")
    assert [(i["subject"], i["count"]) for i in timeouts] == [("be_llm/srv1", 3)] and within(timeouts[0], slow[:2])
    connect = incidents(data, "upstream_connect_error", ".log")
    assert [(i["subject"], i["count"]) for i in connect] == [("be_dead/srv2", 3)] and within(connect[0], refused[:2])
    no_server = incidents(data, "no_healthy_upstream", ".log")
    assert [(i["subject"], i["count"]) for i in no_server] == [("be_down", 2)] and within(no_server[0], down[:2])
    codes = {f["code"]: f for f in data["findings"]}
    assert {"R006", "R007", "R008"} <= set(codes)
    assert near_timeout(codes["R008"]["evidence"]["inferred_timeout_ms"], 1000)
    assert data["metrics"]["attempts"]["2"] == 3  # one retry per refused request
    # six requests through a server with maxconn 1 and 200 ms per request: up to ~1 s in the queue
    assert "R009" in codes and codes["R009"]["evidence"]["worst_max_queue_ms"] >= 600
    assert max(q["max_ms"] for q in data["metrics"]["queue"]) >= 600
