"""An exporter that serves the recorded dcgm-exporter exposition (tests/corpus/metrics), one per GPU node.

dcgm-exporter needs a GPU; its recorded output (the Datadog fixture's T4 captures) is served as recorded, with
the ``Hostname`` label set to the node it stands for. A sick node's values are changed in known ways
(``overrides``: metric name -> value for every labelled sample of that metric).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.fleet.history import DCGM_RECORDING

_VALUE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})\s+(\S+)$")


def exposition(hostname: str, overrides: Mapping[str, float] | None = None) -> str:
    """The recording with this node's Hostname and the overridden values."""
    out = []
    for line in DCGM_RECORDING.read_text(encoding="utf-8").splitlines():
        match = _VALUE.match(line)
        if match and overrides and match.group(1) in overrides:
            line = f"{match.group(1)}{match.group(2)} {overrides[match.group(1)]:g}"
        out.append(re.sub(r'Hostname="[^"]*"', f'Hostname="{hostname}"', line))
    return "\n".join(out) + "\n"


@contextmanager
def dcgm_exporter(hostname: str, overrides: Mapping[str, float] | None = None) -> Iterator[int]:
    """Serve the exposition on a free loopback port until the block ends; yields the port."""
    with text_exporter(exposition(hostname, overrides)) as port:
        yield port


@contextmanager
def text_exporter(text: str) -> Iterator[int]:
    """Serve a recorded exposition as recorded on a free loopback port; yields the port."""
    body = text.encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200 if self.path.startswith("/metrics") else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
