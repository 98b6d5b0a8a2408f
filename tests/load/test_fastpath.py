"""The compiled fast path (``infradoctor.load._fastpath``): its strict response scanner agrees with httptools, and a
connection's reader takes only what the Python path would take, handing everything else over untouched."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httptools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.load.test_engine_clock import FakeClock, FakeTransport, require_compiled

PLAIN = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello"


@pytest.fixture(scope="module")
def fastpath() -> Any:
    require_compiled()
    from infradoctor.load import _fastpath

    return _fastpath


@pytest.mark.parametrize(
    "raw,capture,expected",
    [
        (PLAIN, (), 1),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", (), 1),
        (b"HTTP/1.1 200\r\ncontent-LENGTH:2\r\n\r\nok", (), 1),  # no reason phrase, any case, no space
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2 \t\r\nX-A: \r\n\r\nok", (), 1),  # trailing and empty values
        (b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n", (), 0),  # one response, not a plain 200
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", (), 0),
        (b"HTTP/1.1 200 OK\r\nServer-Timing: app\r\nContent-Length: 2\r\n\r\nok", (b"server-timing",), 0),
        (b"HTTP/1.1 200 OK\r\nServer-Timing: app\r\nContent-Length: 2\r\n\r\nok", (), 1),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", (b"content-length",), 0),  # captured, though special
        (b"HTTP/1.1 200 OK\r\nProxy-Connection: close\r\nContent-Length: 2\r\n\r\nok", (), 0),  # llhttp: close
        (b"HTTP/1.1 200 OK\r\nProxy-Connection: keep-alive\r\nContent-Length: 2\r\n\r\nok", (), 1),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", (), -1),  # body still coming
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", (), -1),  # head still coming
        (PLAIN + PLAIN, (), -1),  # two responses in one read
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", (), -1),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", (), -1),
        (b"HTTP/1.1 200 OK\r\n\r\nok", (), -1),  # no length: read until close
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", (), -1),
        (b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", (), -1),
        (b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok", (), -1),  # space before the colon
        (b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 2\r\n\r\nok", (), -1),
        (b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", (), -1),  # bare LF
        (b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nok", (), -1),
        (b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Upgrade\r\nContent-Length: 2\r\n\r\nok", (), -1),
        (b"HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\nok", (), -1),
        (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 2\r\n\r\n", (), -1),
        (b"HTTP/1.1 100 Continue\r\n\r\n", (), -1),
        (b"HTTP/1.1 2OO OK\r\nContent-Length: 0\r\n\r\n", (), -1),
        (b"", (), -1),
    ],
)
def test_scan(fastpath: Any, raw: bytes, capture: tuple[bytes, ...], expected: int) -> None:
    assert fastpath.scan(raw, capture) == expected


class Recorder:
    def __init__(self) -> None:
        self.complete = 0
        self.parser: Any = None
        self.plain = False

    def on_message_complete(self) -> None:
        self.complete += 1
        self.plain = self.parser.get_status_code() == 200 and self.parser.should_keep_alive()


_names = st.sampled_from(
    [b"Content-Length", b"content-length", b"Connection", b"Proxy-Connection", b"Transfer-Encoding", b"X-Thing",
     b"Server-Timing", b"Date"]
)
_values = st.sampled_from([b"5", b"0", b"12", b"keep-alive", b"close", b"chunked", b"x y", b"", b" 5 ", b"5x"])


@settings(max_examples=400, deadline=None)
@given(
    status=st.sampled_from([b"200", b"201", b"404", b"503", b"204", b"304", b"101"]),
    headers=st.lists(st.tuples(_names, _values), max_size=5),
    body=st.sampled_from([b"", b"hello", b"hello world!", b"\r\nX: y\r\n"]),
    cut=st.integers(-3, 3),
    capture=st.sampled_from([(), (b"server-timing",), (b"content-length",)]),
)
def test_scan_agrees_with_httptools(
    fastpath: Any, status: bytes, headers: list[tuple[bytes, bytes]], body: bytes, cut: int, capture: tuple[bytes, ...]
) -> None:
    """Whatever the scanner calls one complete response (1 or 0), httptools reads as exactly one complete response
    ending at the last byte, with the status and keep-alive the scanner's verdict implies."""
    raw = b"HTTP/1.1 " + status + b" R\r\n" + b"".join(n + b": " + v + b"\r\n" for n, v in headers) + b"\r\n" + body
    if cut < 0:
        raw = raw[:cut]
    elif cut > 0:
        raw = raw + raw[:cut]
    verdict = fastpath.scan(raw, capture)
    if verdict < 0:
        return
    recorder = Recorder()
    parser = recorder.parser = httptools.HttpResponseParser(recorder)
    parser.feed_data(raw)
    assert recorder.complete == 1
    has_capture = any(n.lower() in capture for n, _ in headers)
    assert verdict == (1 if recorder.plain and not has_capture else 0)
    # the parser stands at a message boundary: the next response parses from its first byte (unless this one
    # closes the connection, after which httptools rightly refuses more data)
    if parser.should_keep_alive():
        parser.feed_data(PLAIN)
        assert recorder.complete == 2


class Conn:
    """What a reader touches on a connection."""

    def __init__(self) -> None:
        self.busy = True
        self.t_intended = 1.0
        self.t_send = 1.0
        self.general: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        self.general.append(data)


def make_reader(fastpath: Any, clock: FakeClock, *, counted: bool = False) -> tuple[Any, Any, Conn, FakeTransport]:
    sink = fastpath.Sink(counted=counted)
    sink.until = 10.0
    conn = Conn()
    transport = FakeTransport()
    reader = fastpath.Reader(sink, conn, Conn.data_received, b"GET / HTTP/1.1\r\n\r\n", (), clock)
    reader.write = transport.write
    return sink, reader, conn, transport


def test_reader_takes_a_plain_response_and_issues_the_next(fastpath: Any) -> None:
    clock = FakeClock(1.25)
    sink, reader, conn, transport = make_reader(fastpath, clock)
    reader.feed(PLAIN)
    assert conn.general == [] and transport.written == [b"GET / HTTP/1.1\r\n\r\n"]
    assert conn.t_intended == conn.t_send == 1.25 and sink.last == 1.25 and reader.taken == 1
    clock.now = 1.5
    reader.feed(PLAIN)
    assert list(sink.take()) == [0.25, 0.25] and len(sink) == 0 and reader.taken == 2


def test_reader_hands_over_what_it_does_not_take(fastpath: Any) -> None:
    clock = FakeClock(2.0)
    sink, reader, conn, transport = make_reader(fastpath, clock, counted=True)
    sink.left = 1
    reader.feed(PLAIN)  # taken: the budget is spent
    reader.feed(PLAIN)  # over budget: the Python path decides
    busy = b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n"
    sink.left = 5
    reader.feed(busy)  # not a 200
    clock.now = 11.0
    reader.feed(PLAIN)  # past the window
    clock.now = 3.0
    conn.busy = False
    reader.feed(PLAIN)  # nothing in flight
    assert conn.general == [PLAIN, busy, PLAIN, PLAIN] and reader.enabled and reader.taken == 1
    assert sink.left == 5 and len(transport.written) == 1
    conn.busy = True
    reader.feed(PLAIN[:20])  # a response split over reads: the Python parser holds a part; the reader steps aside
    reader.feed(PLAIN[20:])
    reader.feed(PLAIN)
    assert conn.general[-3:] == [PLAIN[:20], PLAIN[20:], PLAIN] and not reader.enabled and reader.taken == 1


def test_reader_errors_propagate(fastpath: Any) -> None:
    clock = FakeClock(2.0)
    sink, reader, conn, transport = make_reader(fastpath, clock)

    def broken(data: bytes) -> None:
        raise ConnectionResetError("gone")

    reader.write = broken
    with pytest.raises(ConnectionResetError):
        reader.feed(PLAIN)
    with pytest.raises(TypeError):
        fastpath.Reader(sink, conn, Conn.data_received, b"x", (b"a\x00b",), clock)


ABUSE = r'''
import gc, sys
from infradoctor.load import _fastpath

PLAIN = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello"
REQUEST = b"GET / HTTP/1.1\r\n\r\n"
calls = []


def general(conn, data):
    calls.append(("general", len(data)))


class Writer:  # a callable only the reader holds: freed the moment the reader lets go of it
    def __call__(self, data):
        calls.append(("write", len(data)))


class Conn:
    def __init__(self, reader_box, abuse):
        self.box = reader_box
        self.abuse = abuse
        self.t_send = 0.0
        self._t = 1.0

    @property
    def busy(self):
        if self.abuse == "del write":
            del self.box[0].write  # the reader's only reference to its Writer goes mid-call
        elif self.abuse == "none write":
            self.box[0].write = None
        elif self.abuse == "reinit":  # a re-entrant __init__ drops the sink, conn and general the call uses
            self.box[0].__init__(_fastpath.Sink(), Conn(self.box, ""), general, b"other", (b"x-a",), lambda: 5.0)
        return True

    @property
    def t_intended(self):
        if self.abuse == "reinit in t_intended":
            self.box[0].__init__(_fastpath.Sink(), Conn(self.box, ""), general, b"other", (), lambda: 5.0)
        return self._t

    @t_intended.setter
    def t_intended(self, value):
        if self.abuse == "del write in setter":
            del self.box[0].write
        self._t = value


def make(abuse):
    box = []
    sink = _fastpath.Sink()
    sink.until = 1e9
    reader = _fastpath.Reader(sink, Conn(box, abuse), general, REQUEST, (b"server-timing",), lambda: 2.0)
    box.append(reader)
    reader.write = Writer()
    return reader


def reentrant_general(conn, data):
    conn.box[0].__init__(_fastpath.Sink(), Conn(conn.box, ""), general, REQUEST, (), lambda: 3.0)


for _ in range(300):
    for abuse in ("del write", "none write", "reinit", "reinit in t_intended", "del write in setter", ""):
        reader = make(abuse)
        del_then = reader.feed
        try:
            del_then(PLAIN)
        except Exception as exc:  # an exception is fine; a crash is not
            calls.append(("raised", type(exc).__name__))
        del reader, del_then
    box = []
    reader = _fastpath.Reader(_fastpath.Sink(), Conn(box, ""), reentrant_general, REQUEST)
    box.append(reader)
    reader.feed(b"not http")  # the general path re-initialises the reader while it runs
    del reader, box
    gc.collect()

blank = _fastpath.Reader.__new__(_fastpath.Reader)
try:
    blank.feed(PLAIN)
except RuntimeError:
    calls.append(("uninitialised", 0))
reader = make("")
try:
    reader.write = 42
except TypeError:
    calls.append(("not callable", 0))
reader.write = None
reader.feed(PLAIN)
assert reader.taken == 0 and reader.write is None
print(len(calls), sorted(set(c[0] for c in calls)))
'''


def test_reader_survives_reentrant_abuse(fastpath: Any, tmp_path: Path) -> None:
    """Python code the reader calls mid-feed (the connection's attributes, the clock, the general path) deletes
    ``reader.write``, sets it to None or re-initialises the reader: no use-after-free or NULL call. Run under
    Python's debug allocator, which fills freed memory, so that a freed object used later crashes the child."""
    import subprocess
    import sys

    script = tmp_path / "abuse.py"
    script.write_text(ABUSE)
    env = {**os.environ, "PYTHONMALLOC": "debug", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-X", "dev", str(script)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    count, kinds = out.stdout.split(" ", 1)
    assert int(count) > 1000
    assert eval(kinds) == ["general", "not callable", "uninitialised", "write"]  # noqa: S307 - our own output
