"""A small HTTP/1.1 keep-alive client for the prober: one connection, one request at a time, headers captured.

Latency is measured from writing the request to reading the last byte of the body. Failures are classified with
the same error classes as the load engine (``connect_refused``, ``read_timeout``, ``reset``, ``http_503`` ...).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from infradoctor import __version__
from infradoctor.route.network import connect_error_class
from infradoctor.route.prober import Exchange

MAX_HEADER_BYTES = 65536
"""Largest response head accepted."""


def status_class(status: int) -> str | None:
    """Error class of an HTTP status (None for 1xx-3xx); each 5xx keeps its own class."""
    if status < 400:
        return None
    if status == 429:
        return "http_429"
    if status >= 500:
        return f"http_{status}"
    return "http_4xx"


class ProtocolError(Exception):
    """The response was not valid HTTP/1.1."""


class StreamSender:
    """Sends one fixed request over a keep-alive connection, reconnecting when the server closes it."""

    def __init__(
        self,
        url: str,
        *,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 30.0,
        capture: Sequence[str] = (),
    ) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = parts.scheme == "https"
        self.timeout_s = timeout_s
        self.capture = frozenset(h.lower() for h in capture)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"{method.upper()} {path} HTTP/1.1", f"Host: {parts.netloc}", f"User-Agent: infradoctor/{__version__}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items() if k.lower() not in ("host", "content-length")]
        if body is not None or method.upper() in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        self.request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.opened = 0
        """TCP connections opened so far."""

    async def send(self) -> Exchange:
        """Send the request once; every failure becomes an error class."""
        start = time.perf_counter()
        if self.writer is None:
            try:
                self.reader, self.writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port, ssl=self.ssl or None), self.timeout_s
                )
            except (OSError, asyncio.TimeoutError) as exc:
                return Exchange(None, connect_error_class(exc), _ms(start))
            self.opened += 1
        try:
            status, headers, keep_alive = await asyncio.wait_for(self._exchange(), self.timeout_s)
        except asyncio.TimeoutError:
            await self.close()
            return Exchange(None, "read_timeout", _ms(start))
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as exc:
            await self.close()
            started = isinstance(exc, asyncio.IncompleteReadError) and bool(exc.partial)
            return Exchange(None, "stream_aborted" if started else "reset", _ms(start))
        except (ProtocolError, ValueError, asyncio.LimitOverrunError):
            await self.close()
            return Exchange(None, "protocol_error", _ms(start))
        latency = _ms(start)
        if not keep_alive:
            await self.close()
        return Exchange(status, status_class(status), latency, headers)

    async def _exchange(self) -> tuple[int, dict[str, str], bool]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(self.request)
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEADER_BYTES:
            raise ProtocolError("response head too large")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ProtocolError(f"bad status line {lines[0]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        length: int | None = None
        chunked = False
        keep_alive = parts[0] == "HTTP/1.1"
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            key, value = name.strip().lower(), value.strip()
            if key == "content-length":
                length = int(value)
            elif key == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
            elif key == "connection":
                keep_alive = "close" not in value.lower() and (keep_alive or "keep-alive" in value.lower())
            if key in self.capture:
                headers[key] = f"{headers[key]}, {value}" if key in headers else value
        if status in (204, 304) or 100 <= status < 200:
            return status, headers, keep_alive
        if chunked:
            while True:
                size_line = await self.reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while (await self.reader.readuntil(b"\r\n")) != b"\r\n":
                        pass
                    break
                await self.reader.readexactly(size + 2)
        elif length is not None:
            await self.reader.readexactly(length)
        else:
            await self.reader.read()  # close-delimited body
            keep_alive = False
        return status, headers, keep_alive

    async def close(self) -> None:
        """Close the connection (the next send reconnects)."""
        writer, self.writer, self.reader = self.writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError, asyncio.TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0
