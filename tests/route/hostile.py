"""Hostile HTTP peers on loopback for route's side probes and the statistics sampler: real sockets, one thread each.

Each mode answers every connection the same way: ``garbage`` (bytes that are not HTTP), ``many-headers``
(a 200 with 100,000 header lines), ``trickle`` (a valid response sent one byte per second), ``huge`` (a 200 whose
body is 20 MB of text), ``body:<text>`` (a 200 with that body), ``silent`` (accepts and says nothing).
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

HUGE_BYTES = 20_000_000


class _Handler(socketserver.BaseRequestHandler):
    mode = "garbage"

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(5.0)
        with contextlib.suppress(OSError):
            sock.recv(65536)
            mode = self.server.mode  # type: ignore[attr-defined]
            stop: threading.Event = self.server.stop_event  # type: ignore[attr-defined]
            if mode == "garbage":
                sock.sendall(b"\x00\xffNOT HTTP AT ALL\r\n\r\n" * 50)
            elif mode == "many-headers":
                sock.sendall(b"HTTP/1.1 200 OK\r\n")
                chunk = b"".join(b"X-H%d: v\r\n" % i for i in range(1000))
                for _ in range(100):
                    sock.sendall(chunk)
                sock.sendall(b"Content-Length: 2\r\n\r\nok")
            elif mode == "trickle":
                for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello":
                    if stop.wait(1.0):
                        return
                    sock.sendall(bytes([byte]))
            elif mode == "huge":
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % HUGE_BYTES)
                line = b"x_metric 1\n" * 10_000
                sent = 0
                while sent < HUGE_BYTES and not stop.is_set():
                    sock.sendall(line[: HUGE_BYTES - sent])
                    sent += min(len(line), HUGE_BYTES - sent)
            elif mode.startswith("body:"):
                body = mode[5:].encode()
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
            elif mode == "silent":
                stop.wait(30.0)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextmanager
def hostile_peer(mode: str) -> Iterator[str]:
    """A peer answering in ``mode`` on a free loopback port; yields its base URL, stops it on exit."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.mode = mode  # type: ignore[attr-defined]
    server.stop_event = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.stop_event.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        time.sleep(0.01)
