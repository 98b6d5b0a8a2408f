"""A fault-injecting HTTP proxy in front of a real Prometheus: slow answers, errors for chosen queries, partial data.

The answers are Prometheus' own; the proxy only delays them, replaces them with the error envelope Prometheus
itself sends (``{"status":"error","errorType":...}`` with 503), or adds the ``warnings`` Prometheus attaches to a
partial answer. It can require an Authorization header and records the ones it saw.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Faults:
    delay_s: float = 0.0
    fail_pattern: str | None = None
    """Queries matching this regex get Prometheus' 503 error envelope."""
    warn_pattern: str | None = None
    """Answers to queries matching this regex get a partial-data warning."""
    junk: bytes | None = None
    """Answer every query with these bytes (status 200) instead of Prometheus' answer."""
    require_auth: str | None = None
    """The Authorization header value required (401 otherwise)."""
    seen_auth: list[str] = field(default_factory=list)


@contextmanager
def fault_proxy(upstream: str, faults: Faults) -> Iterator[str]:
    """A proxy on a free loopback port; yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self, body: bytes | None) -> None:
            auth = self.headers.get("Authorization") or ""
            faults.seen_auth.append(auth)
            if faults.require_auth is not None and auth != faults.require_auth:
                self._send(401, b"Unauthorized\n")
                return
            if faults.delay_s:
                time.sleep(faults.delay_s)
            if faults.junk is not None:
                self._send(200, faults.junk)
                return
            form = urllib.parse.parse_qs((body or b"").decode()) if body else {}
            query = (form.get("query") or [""])[0]
            if faults.fail_pattern and re.search(faults.fail_pattern, query):
                self._send(503, json.dumps({"status": "error", "errorType": "unavailable",
                                            "error": "store gateway unavailable"}).encode())
                return
            request = urllib.request.Request(upstream + self.path, data=body, method=self.command)
            if body is not None:
                request.add_header("Content-Type", "application/x-www-form-urlencoded")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
                    status, payload = response.status, response.read()
            except urllib.error.HTTPError as exc:
                status, payload = exc.code, exc.read()
            if faults.warn_pattern and re.search(faults.warn_pattern, query) and status == 200:
                doc = json.loads(payload)
                doc["warnings"] = ["remote store eu-1 did not answer: results may be incomplete"]
                payload = json.dumps(doc).encode()
            self._send(status, payload)

        def do_GET(self) -> None:
            self._handle(None)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._handle(self.rfile.read(length))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
