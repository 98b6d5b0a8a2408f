"""The hot path: HTTP/1.1 client connections on asyncio Protocols (uvloop and httptools when installed).

Each connection carries one request at a time (no pipelining). Request bytes are built once; a response is parsed
by httptools (or :mod:`infradoctor.load.pyparser`) and its completion is reported straight to the driver from the
parser callback, so a closed-loop worker sends its next request without any task switch. Header parsing and
server-sent-event timing are switched on only when asked for, in subclasses, to keep the plain path lean.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import sys
import time
from array import array
from collections.abc import Callable
from typing import Any, Protocol

from infradoctor.load import pyparser
from infradoctor.load.sse import SSEParser
from infradoctor.load.taxonomy import PROTOCOL_ERROR, final_status

try:  # pragma: no cover - exercised where httptools is installed (the load extra)
    import httptools

    _ParserError: tuple[type[BaseException], ...] = (httptools.HttpParserError, pyparser.HttpParserError)
    HAVE_HTTPTOOLS = True
except ImportError:  # pragma: no cover - the fallback is tested by forcing it
    httptools = None  # type: ignore[assignment]
    _ParserError = (pyparser.HttpParserError,)
    HAVE_HTTPTOOLS = False

try:  # pragma: no cover - built by setup.py where a C compiler is present
    from infradoctor.load import _fastpath
except ImportError:  # pragma: no cover - the Python fast path covers its absence
    _fastpath = None  # type: ignore[assignment]

MAX_INTERIM = 8
"""Interim (1xx) responses accepted before one request's final response; more is a protocol error."""
MAX_CAPTURED_CHARS = 8192
"""Most characters kept of one captured header (its repeated lines joined); the rest is cut."""
MAX_GAPS = 65_536
"""Inter-token gaps kept per streamed response (later tokens are counted, their gaps not timed)."""
MAX_CAPTURED_LINES = 32
"""Most repeated lines of one captured header read."""

COMPILED_ENV = "INFRADOCTOR_LOAD_COMPILED"
"""Set to ``0`` to keep the compiled fast path off (the Python one runs instead): benchmarks, debugging."""


def compiled_fast_path() -> bool:
    """The compiled fast path (``infradoctor.load._fastpath``) is built and not switched off."""
    return _fastpath is not None and os.environ.get(COMPILED_ENV, "1") != "0"


class Driver(Protocol):
    """What a connection reports to: the point runner."""

    def on_response(self, conn: Connection) -> None:
        """A response completed on ``conn`` (status in ``conn.status``)."""

    def on_failure(self, conn: Connection, error_class: str) -> None:
        """The in-flight request on ``conn`` failed with a transport error class."""

    def on_closed(self, conn: Connection) -> None:
        """``conn`` is closed and will not be used again."""


def make_parser(callbacks: Any, *, pure_python: bool = False, no_body: bool = False) -> Any:
    """An httptools response parser, or the pure-Python one when httptools is missing or ``pure_python``."""
    if HAVE_HTTPTOOLS and not pure_python:
        return httptools.HttpResponseParser(callbacks)
    parser = pyparser.PyResponseParser(callbacks)
    parser.no_body = no_body
    return parser


class Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    pure_python = False
    clock: Callable[[], float] = staticmethod(time.perf_counter)
    """Monotonic clock in seconds for every timestamp (injectable for tests)."""
    no_body = False
    """Responses carry no body (requests are HEAD)."""
    has_state = False
    """Subclasses with per-request state set this so that ``prepare`` runs before each send."""
    captures = False
    """Responses carry extras for the driver (headers, stream timing)."""

    def __init__(self, driver: Driver, worker: int = -1) -> None:
        self.driver = driver
        self.worker = worker
        """Closed-loop worker that owns this connection (-1 in the open loop)."""
        self.transport: asyncio.Transport | None = None
        self.parser: Any = make_parser(self, pure_python=self.pure_python, no_body=self.no_body)
        self.busy = False
        """A request is in flight."""
        self.closed = False
        self.received = False
        """Some of the current response arrived (tells an aborted response from a reset)."""
        self.first_chunk = b""
        """The first bytes of the current response (its head, for header capture)."""
        self.reusable = True
        """The last response allowed keep-alive."""
        self.status = 0
        self.t_intended = 0.0
        """When the request was meant to start (open loop: the schedule; closed loop: when the worker issued it)."""
        self.t_send = 0.0
        """When its bytes were written."""
        self.index = 0
        """Request number within the point."""
        self.interim = 0
        """Interim (1xx) responses received for the current request."""

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.received:
            self.received = True
            self.first_chunk = data
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
            status = self.parser.get_status_code() if self.received else 0
            if self.received and not self.parser.should_keep_alive() and final_status(status):
                # httptools cannot be told about EOF: a close-delimited body ends here
                self.status = status
                self.reusable = False
                self.driver.on_response(self)
            elif self.interim and not final_status(status):
                self.driver.on_failure(self, PROTOCOL_ERROR)  # only interim responses, then the end
            else:
                self.driver.on_failure(self, "stream_aborted" if self.received else "reset")
        self.driver.on_closed(self)
        self.release()

    def release(self) -> None:
        """Let go of per-response buffers once closed.

        The connection and its parser reference each other, so the object itself waits for the garbage collector;
        what it holds need not.
        """
        self.first_chunk = b""

    # parser callbacks (no on_headers_complete here: one Python call less per response)
    def on_message_complete(self) -> None:
        if not self.busy:
            return
        status = self.parser.get_status_code()
        if not final_status(status):
            if 100 <= status < 200 and status != 101 and self.interim < MAX_INTERIM:
                self.interim += 1  # an interim response (100 Continue, 103 Early Hints): the final one follows
                return
            # outside 100-599, an upgrade nobody asked for, or interim responses without end
            self.busy = False
            self.reusable = False
            self.driver.on_failure(self, PROTOCOL_ERROR)
            self.abort()
            return
        self.busy = False
        self.status = status
        self.reusable = self.parser.should_keep_alive()
        if self.no_body and self.reusable:
            self.parser = make_parser(self, pure_python=self.pure_python, no_body=self.no_body)
        self.driver.on_response(self)

    # driver side
    def send(self, data: bytes, t_intended: float, index: int) -> None:
        """Write one request; the response is reported to the driver.

        ``t_intended`` is when the request was meant to (open loop) or decided to (closed loop, before a connect)
        start; 0 means "now", at the write.
        """
        self.busy = True
        self.received = False
        self.interim = 0
        self.index = index
        if self.has_state:
            self.prepare()
        self.t_send = now = self.clock()
        self.t_intended = t_intended or now
        self.transport.write(data)  # type: ignore[union-attr]

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
    """A connection that also reads the response headers named in ``capture`` (lower-case bytes).

    Rather than a parser callback per header line, the headers are read out of the first bytes of the response
    (kept by :meth:`Connection.data_received`) once per response, only when asked for: much cheaper in Python.
    The head must arrive in the first read, which holds for any head up to a TCP segment (64 kB on loopback).
    """

    capture: frozenset[bytes] = frozenset()
    captures = True

    @property
    def headers(self) -> dict[str, str]:
        """The captured headers of the current response (names lower case; repeated headers joined by ', ')."""
        return read_headers(self.first_chunk, self.capture)


def read_headers(head: bytes, names: frozenset[bytes]) -> dict[str, str]:
    """The headers called ``names`` (lower-case bytes) from raw response bytes (status line, headers, maybe body).

    Repeated headers are joined by ``', '``; at most :data:`MAX_CAPTURED_LINES` lines and
    :data:`MAX_CAPTURED_CHARS` characters of each are kept (a peer's 10,000 ``Server-Timing`` lines cost a cut,
    not a quadratic join).
    """
    end = head.find(b"\r\n\r\n")
    block = head[:end] if end >= 0 else head
    lower = block.lower()
    out: dict[str, str] = {}
    for name in names:
        start = lower.find(name)
        if start < 0:  # the common case: not there at all
            continue
        needle = b"\r\n" + name + b":"
        start = lower.find(needle)
        parts: list[bytes] = []
        size = 0
        while start >= 0 and len(parts) < MAX_CAPTURED_LINES and size < MAX_CAPTURED_CHARS:
            value_start = start + len(needle)
            line_end = block.find(b"\r\n", value_start)
            raw = block[value_start : line_end if line_end >= 0 else len(block)].strip()
            parts.append(raw)
            size += len(raw) + 2
            start = lower.find(needle, value_start)
        if parts:
            out[name.decode("latin-1")] = b", ".join(parts)[:MAX_CAPTURED_CHARS].decode("latin-1")
    return out


class StreamConnection(HeaderConnection):
    """A connection that times each server-sent event of the response (TTFT, inter-token gaps, token count)."""

    openai = False
    has_state = True

    def __init__(self, driver: Driver, worker: int = -1) -> None:
        super().__init__(driver, worker)
        self.sse = SSEParser(openai=self.openai)
        self.t_first_token = 0.0
        self.t_last_token = 0.0
        self.tokens = 0
        self.gaps: list[float] = []

    def release(self) -> None:
        super().release()
        self.sse = SSEParser(openai=self.openai)
        self.gaps = []

    def prepare(self) -> None:
        self.sse = SSEParser(openai=self.openai)
        self.t_first_token = 0.0
        self.t_last_token = 0.0
        self.tokens = 0
        self.gaps = []

    def on_body(self, body: bytes) -> None:
        count = self.sse.feed(body)
        if count:
            now = self.clock()
            if self.tokens == 0:
                self.t_first_token = now
            elif len(self.gaps) < MAX_GAPS:
                self.gaps.append(now - self.t_last_token)
            # tokens that arrive in one read share its timestamp: their gaps are 0
            room = MAX_GAPS - len(self.gaps)
            if room > 0:
                self.gaps.extend([0.0] * min(count - 1, room))
            self.t_last_token = now
            self.tokens += count

    @property
    def output_tokens(self) -> int:
        """Tokens in this response: the server's usage count when sent, else the token-bearing events."""
        usage = self.sse.usage_tokens
        return usage if usage is not None else self.tokens


class FastSink:
    """One closed-loop driver's buffer of fast-path latencies, with the window and budget they are taken in.

    The Python twin of ``_fastpath.Sink`` (used when the compiled fast path is off or not built).
    """

    __slots__ = ("until", "last", "left", "counted", "_buf", "append")

    def __init__(self, counted: bool = False) -> None:
        self.until = -math.inf
        """Responses completing before this time may be buffered (the end of the current one-second window)."""
        self.last = 0.0
        """Completion time of the last buffered response."""
        self.left = 0
        """Requests that may still be issued, when ``counted`` (the run is bounded by ``--requests``)."""
        self.counted = counted
        self._buf: array[float] = array("d")
        self.append = self._buf.append

    def __len__(self) -> int:
        return len(self._buf)

    def take(self) -> array[float]:
        """The buffered latencies (s), in order; empties the buffer."""
        out = array("d", self._buf)
        del self._buf[:]
        return out


def make_sink(counted: bool) -> Any:
    """The compiled sink when the compiled fast path is on, else :class:`FastSink` (same interface)."""
    if compiled_fast_path():
        return _fastpath.Sink(counted=counted)
    return FastSink(counted)


class FastConnection(Connection):
    """The closed loop's plainest case, at the least Python per request.

    A ``200`` with keep-alive that completes before the driver's ``sink.until`` (the end of the current one-second
    window and of the measurement window) is recorded by appending its latency to the driver's sink, and the next
    request (``fast_data``) is written at once: no driver call, no per-request bookkeeping. The driver folds the
    sink into its histogram and counters in batches (before anything else it handles, and at every housekeeping
    tick, so the sink holds at most a tenth of a second of responses); the result is the same as recording each
    response one by one, up to the spacing of clock reads (the fast path takes a request's issue time from the
    clock read that completed the previous response, the general path from one at its write, well under a
    microsecond later). Everything else takes the general path. ``on_message_complete`` is made per driver by
    :func:`fast_completion` (closure variables are the cheapest lookups Python has).

    With the compiled fast path (``compiled`` set on the class by :func:`connection_class`), a ``_fastpath.Reader``
    stands in for ``data_received``: a read that is exactly one such response is taken in C, without the parser
    callback or any bytecode; every other read comes here, to the Python path.
    """

    compiled = False
    fast_sink: Any = None
    fast_data = b""
    fast_capture: tuple[bytes, ...] = ()

    def __init__(self, driver: Driver, worker: int = -1) -> None:
        super().__init__(driver, worker)
        self.reader: Any = None
        if self.compiled:
            self.reader = _fastpath.Reader(
                self.fast_sink,
                self,
                type(self).data_received,
                self.fast_data,
                self.fast_capture,
                # C reads CLOCK_MONOTONIC itself where that is perf_counter's clock (Linux)
                None if self.clock is time.perf_counter and sys.platform.startswith("linux") else self.clock,
            )
            # the event loop calls the instance's data_received (uvloop looks it up once, at connect)
            self.data_received = self.reader.feed  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.reader is not None:
            self.reader.write = transport.write  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.received = True  # (no first_chunk: nothing here reads headers)
        try:
            self.parser.feed_data(data)
        except _ParserError:
            if self.busy:
                self.busy = False
                self.driver.on_failure(self, "protocol_error")
            self.abort()


class FastHeaderConnection(HeaderConnection, FastConnection):
    """:class:`FastConnection` for a spec that captures headers.

    A response none of whose head lines names a captured header (one case-insensitive regex search over the head)
    takes the fast path; one that carries them goes the general way, where they are read.
    """

    data_received = HeaderConnection.data_received  # (keeps first_chunk, where the headers are read)


def fast_completion(
    driver: Any, clock: Callable[[], float], capture: frozenset[bytes] = frozenset()
) -> Callable[[Connection], None]:
    """The fast connections' parser callback for one driver.

    The driver has ``fast_data`` (its one request) and ``fast_sink`` (a :class:`FastSink` or ``_fastpath.Sink``:
    the window, the budget of requests it may still issue when counted, the buffer); with ``capture``, the fast
    path takes only responses without those headers.
    """
    sink = driver.fast_sink
    append = sink.append
    counted: bool = sink.counted
    data: bytes = driver.fast_data
    general = Connection.on_message_complete
    search = None
    if capture:
        search = re.compile(
            b"\r\n(?:" + b"|".join(re.escape(name) for name in sorted(capture)) + b")[ \t]*:", re.IGNORECASE
        ).search

    def on_message_complete(self: Connection) -> None:
        now = clock()
        parser = self.parser
        if (
            now < sink.until
            and self.busy
            and parser.get_status_code() == 200
            and parser.should_keep_alive()
            and not self.interim  # (the general path resets it for the next request)
        ):
            if search is not None:
                head = self.first_chunk
                end = head.find(b"\r\n\r\n")  # the whole head came in the first read (see HeaderConnection)
                if end < 0 or search(head, 0, end + 2) is not None:
                    general(self)
                    return
            if counted:
                if sink.left <= 0:
                    general(self)
                    return
                sink.left -= 1
            append(now - self.t_intended)
            sink.last = now
            # closed loop: the next request is issued now, on the same connection
            self.t_intended = self.t_send = now
            self.received = False
            self.transport.write(data)  # type: ignore[union-attr]
            return
        general(self)

    return on_message_complete


def _complete_at_headers(self: Connection) -> None:
    self.on_message_complete()


def connection_class(
    *,
    capture: frozenset[bytes],
    stream: bool,
    openai: bool,
    pure_python: bool,
    no_body: bool = False,
    clock: Callable[[], float] | None = None,
    fast_driver: Any = None,
) -> type[Connection]:
    """The leanest connection class that does what the spec asks (``no_body`` for responses to HEAD).

    ``fast_driver``: a closed-loop driver that takes :class:`FastConnection`'s batches (see :func:`fast_completion`).
    """
    base: type[Connection]
    if stream:
        base = StreamConnection
    elif capture:
        base = FastHeaderConnection if fast_driver is not None and not no_body else HeaderConnection
    elif fast_driver is not None and not no_body:
        base = FastConnection
    else:
        base = Connection
    attrs: dict[str, Any] = {"pure_python": pure_python}
    if clock is not None:
        attrs["clock"] = staticmethod(clock)
    if issubclass(base, HeaderConnection):
        attrs["capture"] = capture
    if stream:
        attrs["openai"] = openai
    if base is FastConnection or base is FastHeaderConnection:
        attrs["on_message_complete"] = fast_completion(fast_driver, clock or time.perf_counter, capture)
        attrs["fast_sink"] = fast_driver.fast_sink
        attrs["fast_data"] = fast_driver.fast_data
        attrs["fast_capture"] = tuple(sorted(capture))
        attrs["compiled"] = (
            not pure_python and _fastpath is not None and isinstance(fast_driver.fast_sink, _fastpath.Sink)
        )
    if no_body:
        attrs["no_body"] = True
        attrs["on_headers_complete"] = _complete_at_headers
    return type(f"Configured{base.__name__}", (base,), attrs)
