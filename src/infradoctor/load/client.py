"""The hot path: HTTP/1.1 client connections on asyncio Protocols (uvloop and httptools when installed).

Each connection carries one request at a time (no pipelining). Request bytes are built once; a response is parsed
by httptools (or :mod:`infradoctor.load.pyparser`) and its completion is reported straight to the driver from the
parser callback, so a closed-loop worker sends its next request without any task switch. Header parsing and
server-sent-event timing are switched on only when asked for, in subclasses, to keep the plain path lean.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from infradoctor.load import pyparser
from infradoctor.load.sse import SSEParser

try:  # pragma: no cover - exercised where httptools is installed (the load extra)
    import httptools

    _ParserError: tuple[type[BaseException], ...] = (httptools.HttpParserError, pyparser.HttpParserError)
    HAVE_HTTPTOOLS = True
except ImportError:  # pragma: no cover - the fallback is tested by forcing it
    httptools = None  # type: ignore[assignment]
    _ParserError = (pyparser.HttpParserError,)
    HAVE_HTTPTOOLS = False

_perf = time.perf_counter


class Driver(Protocol):
    """What a connection reports to: the point runner."""

    def on_response(self, conn: Connection) -> None:
        """A response completed on ``conn`` (status in ``conn.status``)."""

    def on_failure(self, conn: Connection, error_class: str) -> None:
        """The in-flight request on ``conn`` failed with a transport error class."""

    def on_closed(self, conn: Connection) -> None:
        """``conn`` is closed and will not be used again."""


def make_parser(callbacks: Any, *, pure_python: bool = False) -> Any:
    """An httptools response parser, or the pure-Python one when httptools is missing or ``pure_python``."""
    if HAVE_HTTPTOOLS and not pure_python:
        return httptools.HttpResponseParser(callbacks)
    return pyparser.PyResponseParser(callbacks)


class Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    pure_python = False

    def __init__(self, driver: Driver, worker: int = -1) -> None:
        self.driver = driver
        self.worker = worker
        """Closed-loop worker that owns this connection (-1 in the open loop)."""
        self.transport: asyncio.Transport | None = None
        self.parser: Any = make_parser(self, pure_python=self.pure_python)
        self.busy = False
        """A request is in flight."""
        self.closed = False
        self.headers_done = False
        self.reusable = True
        """The last response allowed keep-alive."""
        self.status = 0
        self.t_intended = 0.0
        """When the request was meant to start (open loop: the schedule; closed loop: when the worker issued it)."""
        self.t_send = 0.0
        """When its bytes were written."""
        self.index = 0
        """Request number within the point."""
        self.no_body = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except _ParserError:
            if self.busy:
                self.busy = False
                self.driver.on_failure(self, "protocol_error")
            self.abort()

    def eof_received(self) -> bool | None:
        feed_eof = getattr(self.parser, "feed_eof", None)
        if self.busy and feed_eof is not None:
            feed_eof()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.busy:
            self.busy = False
            if self.headers_done and not self.parser.should_keep_alive():
                # httptools cannot be told about EOF: a close-delimited body ends here
                self.status = self.parser.get_status_code()
                self.reusable = False
                self.driver.on_response(self)
            else:
                self.driver.on_failure(self, "stream_aborted" if self.headers_done else "reset")
        self.driver.on_closed(self)

    # parser callbacks
    def on_headers_complete(self) -> None:
        self.headers_done = True
        if self.no_body:
            self.on_message_complete()

    def on_message_complete(self) -> None:
        if not self.busy:
            return
        self.busy = False
        self.status = self.parser.get_status_code()
        self.reusable = self.parser.should_keep_alive()
        if self.no_body and self.reusable:
            self.parser = make_parser(self, pure_python=self.pure_python)
        self.driver.on_response(self)

    # driver side
    def send(self, data: bytes, t_intended: float, index: int) -> None:
        """Write one request; the response is reported to the driver."""
        self.busy = True
        self.headers_done = False
        self.t_intended = t_intended
        self.index = index
        self.prepare()
        self.t_send = _perf()
        assert self.transport is not None
        self.transport.write(data)

    def prepare(self) -> None:
        """Reset per-request state before a send (subclasses)."""

    def abort(self) -> None:
        """Drop the connection now (timeouts, end of point)."""
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def close(self) -> None:
        """Close gracefully."""
        if self.transport is not None and not self.closed:
            self.transport.close()


class HeaderConnection(Connection):
    """A connection that also keeps the response headers named in ``capture`` (lower-case bytes)."""

    capture: frozenset[bytes] = frozenset()

    def __init__(self, driver: Driver, worker: int = -1) -> None:
        super().__init__(driver, worker)
        self.headers: dict[str, str] = {}

    def prepare(self) -> None:
        self.headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower in self.capture:
            key = lower.decode("latin-1")
            text = value.decode("latin-1")
            self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text


class StreamConnection(HeaderConnection):
    """A connection that times each server-sent event of the response (TTFT, inter-token gaps, token count)."""

    openai = False

    def __init__(self, driver: Driver, worker: int = -1) -> None:
        super().__init__(driver, worker)
        self.sse = SSEParser(openai=self.openai)
        self.t_first_token = 0.0
        self.t_last_token = 0.0
        self.tokens = 0
        self.gaps: list[float] = []

    def prepare(self) -> None:
        self.headers = {}
        self.sse = SSEParser(openai=self.openai)
        self.t_first_token = 0.0
        self.t_last_token = 0.0
        self.tokens = 0
        self.gaps = []

    def on_body(self, body: bytes) -> None:
        count = self.sse.feed(body)
        if count:
            now = _perf()
            if self.tokens == 0:
                self.t_first_token = now
            else:
                self.gaps.append(now - self.t_last_token)
            # tokens that arrive in one read share its timestamp: their gaps are 0
            self.gaps.extend([0.0] * (count - 1))
            self.t_last_token = now
            self.tokens += count

    @property
    def output_tokens(self) -> int:
        """Tokens in this response: the server's usage count when sent, else the token-bearing events."""
        usage = self.sse.usage_tokens
        return usage if usage is not None else self.tokens


def connection_class(*, capture: frozenset[bytes], stream: bool, openai: bool, pure_python: bool) -> type[Connection]:
    """The leanest connection class that does what the spec asks."""
    base: type[Connection]
    if stream:
        base = StreamConnection
    elif capture:
        base = HeaderConnection
    else:
        base = Connection
    attrs: dict[str, Any] = {"pure_python": pure_python}
    if issubclass(base, HeaderConnection):
        attrs["capture"] = capture
    if stream:
        attrs["openai"] = openai
    return type(f"Configured{base.__name__}", (base,), attrs)
