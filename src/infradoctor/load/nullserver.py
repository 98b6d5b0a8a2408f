"""A minimal HTTP/1.1 server that answers every request at once with ``200 ok``: the generator's calibration target.

Run it as ``python -m infradoctor.load.nullserver PORT``; :func:`null_server` starts it as a child process (so
it does not share the generator's CPU time) and stops it. It reads requests with httptools when available
(bodies included), else by counting request heads.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from infradoctor.procs import free_port, stop_process, wait_for_http

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


class NullProtocol(asyncio.Protocol):
    """Answers each complete request with :data:`RESPONSE`, keeping the connection open."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser: Any = None
        self.buffer = b""
        try:
            import httptools

            self.parser = httptools.HttpRequestParser(self)
        except ImportError:
            self.parser = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.parser is not None:
            try:
                self.parser.feed_data(data)
            except Exception:  # noqa: BLE001 - a broken client gets its connection closed
                if self.transport is not None:
                    self.transport.close()
            return
        self.buffer += data
        count = self.buffer.count(b"\r\n\r\n")
        if count and self.transport is not None:
            self.buffer = self.buffer[self.buffer.rfind(b"\r\n\r\n") + 4 :]
            self.transport.write(RESPONSE * count)

    def on_message_complete(self) -> None:
        if self.transport is not None:
            self.transport.write(RESPONSE)


async def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serve forever on host:port."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(NullProtocol, host, port, backlog=4096)
    async with server:
        await server.serve_forever()


@contextmanager
def null_server(port: int | None = None) -> Iterator[str]:
    """Start the null server as a child process on loopback; yields its URL and always stops it."""
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "infradoctor.load.nullserver", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        if not wait_for_http(url, timeout=20.0, proc=proc):
            raise RuntimeError("the built-in null server did not start")
        yield url
    finally:
        stop_process(proc, grace_s=2.0)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m infradoctor.load.nullserver PORT``."""
    args = sys.argv[1:] if argv is None else argv
    port = int(args[0]) if args else 8089
    from infradoctor.load.engine import run_sync

    try:
        run_sync(serve(port))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    main()
