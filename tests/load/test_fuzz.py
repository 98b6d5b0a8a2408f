"""Fuzzing the load engine's parsers of what peers send (hypothesis: seeded, bounded, fast).

Entry points: the SSE parser, the Server-Timing and Envoy header parsers, HTTP response framing (the pure-Python
parser, the compiled scanner, captured-header reading, and a whole connection fed over httptools or the Python
parser). Inputs mix random bytes with the tokens these formats are made of, cut into arbitrary reads. Each case
asserts that nothing but the documented error escapes, and that time (process CPU) and memory (tracemalloc peak)
stay in proportion to the input. The long run (100k cases per parser) is ``benchmarks/bench_fuzz_load.py``.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infradoctor.load import client
from infradoctor.load.pyparser import HttpParserError, PyResponseParser
from infradoctor.load.servertiming import parse_envoy_upstream_time, parse_server_timing, stages_from_headers
from infradoctor.load.sse import MAX_EVENT_BYTES, MAX_LINE_BYTES, SSEError, SSEParser

FUZZ = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

SSE_TOKENS = [b"data:", b"data: ", b"data", b"event: x", b":comment", b"id: 1", b"retry: 9", b"\n", b"\r", b"\r\n",
              b"\n\n", b"[DONE]", b'{"choices": [{"delta": {"content": "hi"}}]}', b'{"choices": [{"text": "a"}]}',
              b'{"usage": {"completion_tokens": 7}}', b'{"usage": {"completion_tokens": ' + b"9" * 400 + b"}}",
              b'{"usage": {"completion_tokens": -1}}', b"[" * 50, b"]" * 50, b'{"choices": null}', b"\xff\xfe"]
HTTP_TOKENS = [b"HTTP/1.1 ", b"HTTP/1.0 ", b"200", b"000", b"100", b"101", b"204", b"304", b"503", b"999", b" OK",
               b"\r\n", b"\n", b"\r\n\r\n", b"Content-Length: ", b"Content-Length: 2", b"content-length:-1",
               b"Transfer-Encoding: chunked", b"Connection: close", b"Connection: keep-alive", b"0", b"2", b"ff",
               b"ffffffffffffffffffff", b";ext=1", b"Server-Timing: ", b"app;dur=1e308", b"db;dur=5", b"ok",
               b"x-envoy-upstream-service-time: 12", b" ", b"\t", b":", b"\x00", b"\xff" * 3]
TIMING_TOKENS = ["app", "db", ";", ",", "dur=", "desc=", '"', "\\", "1e308", "nan", "inf", "-1", "5.5", "9" * 300,
                 " ", "=", "total", "miss"]


def stream_of(tokens: list[bytes]) -> st.SearchStrategy[bytes]:
    """Bytes made of format tokens and random bytes."""
    piece = st.one_of(st.sampled_from(tokens), st.binary(max_size=12))
    return st.lists(piece, max_size=120).map(b"".join)


@st.composite
def responses(draw: st.DrawFn) -> bytes:
    """One to three well-formed-looking responses (statuses of every kind, framed by length, chunks or close,
    SSE bodies among them), then maybe mutated with format tokens."""
    out = b""
    for _ in range(draw(st.integers(1, 3))):
        status = draw(st.sampled_from([b"200", b"201", b"100", b"103", b"101", b"000", b"204", b"304", b"429",
                                       b"503", b"999", b"2OO"]))
        headers = draw(st.lists(st.sampled_from([b"Server-Timing: app;dur=5", b"Server-Timing: a;dur=1e308",
                                                 b"Connection: close", b"Connection: keep-alive", b"X-A: b",
                                                 b"x-envoy-upstream-service-time: 3"]), max_size=4))
        body = draw(st.one_of(stream_of(SSE_TOKENS), st.binary(max_size=40)))
        framing = draw(st.sampled_from(["length", "chunked", "close", "wrong-length"]))
        if framing == "length":
            headers.append(b"Content-Length: %d" % len(body))
        elif framing == "wrong-length":
            headers.append(b"Content-Length: %d" % (len(body) + draw(st.integers(-5, 5))))
        elif framing == "chunked":
            headers.append(b"Transfer-Encoding: chunked")
            body = (b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n") if body else b"0\r\n\r\n"
        out += b"HTTP/1.1 " + status + b" X\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(out)))
        out = out[:at] + draw(st.sampled_from(HTTP_TOKENS + SSE_TOKENS)) + out[at:]
    return out


def split(data: bytes, sizes: list[int]) -> Iterator[bytes]:
    """``data`` cut into reads of the given sizes (the rest in one)."""
    start = 0
    for size in sizes:
        if start >= len(data):
            return
        yield data[start : start + size]
        start += size
    if start < len(data):
        yield data[start:]


@contextmanager
def bounded(size: int) -> Iterator[None]:
    """The block runs in CPU time and peak memory in proportion to an input of ``size`` bytes.

    The bounds are generous multiples of the goals (<= 50 ms per 100 KB, <= 3x the input + a constant), so that
    a loaded CI machine does not fail them while a quadratic or unbounded parser does.
    """
    tracemalloc.start()
    t0 = time.process_time()
    try:
        yield
    finally:
        took = time.process_time() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert took <= 0.5 + 5e-6 * size, f"{took:.3f} s CPU for {size} bytes"
    assert peak <= 3 * size + 2 * 2**20, f"peak {peak} bytes for {size} bytes"


@FUZZ
@given(data=stream_of(SSE_TOKENS), sizes=st.lists(st.integers(1, 40), max_size=40), openai=st.booleans())
def test_sse_parser(data: bytes, sizes: list[int], openai: bool) -> None:
    parser = SSEParser(openai=openai)
    with bounded(len(data)):
        tokens = 0
        try:
            for chunk in split(data, sizes):
                tokens += parser.feed(chunk)
        except SSEError:
            pass
    assert tokens >= 0 and parser.events >= 0
    assert parser.usage_tokens is None or 0 <= parser.usage_tokens <= 2**40


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"])
def test_sse_parser_reads_any_line_end_split_anywhere(line_end: bytes) -> None:
    stream = line_end.join([b"data: a", b"", b"data: b", b"data: c", b"", b":x", b"data: [DONE]", b"", b""])
    for cut in range(len(stream) + 1):
        parser = SSEParser()
        assert parser.feed(stream[:cut]) + parser.feed(stream[cut:]) == 2, cut
        assert parser.done and parser.events == 3


@pytest.mark.parametrize("piece", [64, 4096, 65536])
def test_sse_parser_is_linear_on_a_line_that_never_ends(piece: int) -> None:
    """A line longer than the cap fails at the cap, whatever the read size (each byte is looked at once: the old
    parser re-joined its buffer on every read, quadratic in the line)."""
    parser = SSEParser()
    fed = 0
    chunk = b"x" * piece
    with bounded(MAX_LINE_BYTES), pytest.raises(SSEError):
        parser.feed(b"data: ")
        while fed <= MAX_LINE_BYTES + piece:
            parser.feed(chunk)
            fed += piece
    assert fed <= MAX_LINE_BYTES + piece


def test_sse_event_cap() -> None:
    parser = SSEParser()
    line = b"data: " + b"x" * 60_000 + b"\n"
    with pytest.raises(SSEError):
        for _ in range(MAX_EVENT_BYTES // 60_000 + 2):
            parser.feed(line)


@FUZZ
@given(text=st.lists(st.sampled_from(TIMING_TOKENS) | st.text(max_size=6), max_size=80).map("".join))
def test_server_timing_parsers(text: str) -> None:
    with bounded(len(text.encode())):
        stages = parse_server_timing(text)
        envoy = parse_envoy_upstream_time(text)
        both = stages_from_headers({"server-timing": text, "x-envoy-upstream-service-time": text})
    assert all(0 <= v <= 86_400_000 for v in [*stages.values(), *both.values()])
    assert envoy is None or 0 <= envoy <= 86_400_000
    assert len(stages) <= 32


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.parser: PyResponseParser | None = None

    def on_body(self, body: bytes) -> None:
        self.events.append(("body", len(body)))

    def on_message_complete(self) -> None:
        assert self.parser is not None
        self.events.append(("done", self.parser.get_status_code()))


@FUZZ
@given(data=st.one_of(responses(), stream_of(HTTP_TOKENS)), sizes=st.lists(st.integers(1, 30), max_size=30),
       head=st.booleans())
def test_python_response_parser(data: bytes, sizes: list[int], head: bool) -> None:
    whole, parts = Recorder(), Recorder()
    outcomes = []
    for rec, chunks in ((whole, [data]), (parts, list(split(data, sizes)))):
        parser = PyResponseParser(rec)
        parser.no_body = head
        rec.parser = parser
        with bounded(len(data)):
            try:
                for chunk in chunks:
                    parser.feed_data(chunk)
                parser.feed_eof()
                outcomes.append("ok")
            except HttpParserError:
                outcomes.append("error")
    completed = [e for e in whole.events if e[0] == "done"]
    assert all(0 <= status <= 999 for _, status in completed)  # (three digits; the connection classifies them)
    if outcomes == ["ok", "ok"]:  # how the bytes were cut into reads does not change the messages
        assert completed == [e for e in parts.events if e[0] == "done"]


@FUZZ
@given(data=stream_of(HTTP_TOKENS), names=st.sets(st.sampled_from([b"server-timing", b"content-length", b"x"])))
def test_captured_header_reading(data: bytes, names: set[bytes]) -> None:
    with bounded(len(data)):
        headers = client.read_headers(data, frozenset(names))
    assert set(headers) <= {n.decode() for n in names}
    assert all(len(v) <= client.MAX_CAPTURED_CHARS for v in headers.values())


@FUZZ
@given(data=st.one_of(responses(), stream_of(HTTP_TOKENS)), capture=st.sampled_from([(), (b"server-timing",)]))
def test_compiled_scanner(data: bytes, capture: tuple[bytes, ...]) -> None:
    fastpath = client._fastpath
    if fastpath is None:
        pytest.skip("infradoctor.load._fastpath not built")
    with bounded(len(data)):
        assert fastpath.scan(data, capture) in (-1, 0, 1)


class Driver:
    """Records what a connection reports; the connection's own exceptions must never reach the event loop."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def on_response(self, conn: client.Connection) -> None:
        assert 200 <= conn.status <= 599
        self.outcomes.append(str(conn.status))
        conn.busy = True  # the next response belongs to a next request

    def on_failure(self, conn: client.Connection, error_class: str) -> None:
        self.outcomes.append(error_class)

    def on_closed(self, conn: client.Connection) -> None:
        self.outcomes.append("closed")


class Transport:
    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


def connection(stream: bool, pure_python: bool) -> Callable[[Driver], client.Connection]:
    cls = client.connection_class(capture=frozenset({b"server-timing"}), stream=stream, openai=stream,
                                  pure_python=pure_python)
    return lambda driver: cls(driver, 0)  # type: ignore[arg-type]


@FUZZ
@given(
    data=st.one_of(responses(), stream_of(HTTP_TOKENS + SSE_TOKENS)),
    sizes=st.lists(st.integers(1, 50), max_size=30),
    stream=st.booleans(),
    pure_python=st.booleans(),
)
def test_a_connection_fed_anything(data: bytes, sizes: list[int], stream: bool, pure_python: bool) -> None:
    """A whole connection (httptools or the Python parser, plain or streaming): whatever arrives, it reports
    responses with final statuses, failures by class, and raises nothing into the event loop."""
    driver = Driver()
    conn = connection(stream, pure_python)(driver)
    conn.connection_made(Transport())  # type: ignore[arg-type]
    conn.send(b"GET / HTTP/1.1\r\n\r\n", 0.0, 0)
    with bounded(len(data)):
        for chunk in split(data, sizes):
            conn.data_received(chunk)
        conn.eof_received()
        conn.connection_lost(None)
    from infradoctor.load.taxonomy import PROTOCOL_ERROR, RESET, STREAM_ABORTED

    assert driver.outcomes[-1] == "closed"
    assert set(driver.outcomes) <= {"closed", PROTOCOL_ERROR, RESET, STREAM_ABORTED} | {
        str(s) for s in range(200, 600)
    }
