"""Hostile HTTP peers on loopback (asyncio servers written here): what each sends is bounded before use.

Each server answers every request on a keep-alive connection the way a broken or malicious peer would; the load
engine must classify it (protocol errors in the taxonomy), keep running at its usual pace, honour its timeout and
hold bounded memory. These are the cases of issue 17, each a regression test.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from infradoctor.load import RequestSpec, run_point

pytestmark = pytest.mark.integration

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one request (its head already read); returns False to close the connection."""


@contextmanager
def hostile(handler: Handler) -> Iterator[str]:
    """Serve ``handler`` for every request on 127.0.0.1 (in a thread with its own event loop); yields the URL."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, object] = {}

    tasks: set[asyncio.Task[None]] = set()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                if not await handler(reader, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            tasks.discard(task)

    async def main() -> None:
        server = await asyncio.start_server(connection, "127.0.0.1", 0)
        box["port"] = server.sockets[0].getsockname()[1]
        box["stop"] = asyncio.Event()
        started.set()
        async with server:
            await box["stop"].wait()  # type: ignore[attr-defined]
            server.close()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield f"http://127.0.0.1:{box['port']}/"
    finally:
        loop.call_soon_threadsafe(box["stop"].set)  # type: ignore[attr-defined]
        thread.join(10)
        loop.close()


def respond(raw: bytes) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(raw)
        await writer.drain()
        return True

    return handler


def sse_chunked(*events: bytes) -> bytes:
    body = b"".join(f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events) + b"0\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + body


@pytest.mark.parametrize("pure_python", [False, True], ids=["httptools", "pyparser"])
def test_a_4000_digit_usage_count_is_not_a_token_count(cli, tmp_path: Path, result_validator, pure_python: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An OpenAI-style stream whose usage.completion_tokens has 4,000 digits: the tokens are counted from the
    events, the run goes on (it used to die of an OverflowError turning tokens into tokens/s)."""
    from infradoctor.load import client

    if pure_python:
        monkeypatch.setattr(client, "HAVE_HTTPTOOLS", False)
    chunk = json.dumps({"choices": [{"delta": {"content": "hi"}}]}).encode()
    usage = b'{"choices": [], "usage": {"completion_tokens": ' + b"9" * 4000 + b"}}"
    raw = sse_chunked(b"data: " + chunk + b"\n\n", b"data: " + chunk + b"\n\n", b"data: " + usage + b"\n\n",
                      b"data: [DONE]\n\n")
    with hostile(respond(raw)) as url:
        out = tmp_path / "r.json"
        run = cli("load", url + "v1/chat/completions", "--openai", "-c", "2", "-d", "0.5", "--json", str(out))
    assert run.exit_code == 0, run.stderr
    data = json.loads(out.read_text())
    result_validator(data)
    point = data["metrics"]["points"][0]
    assert point["ok"] > 5 and point["errors"] == {}
    assert point["stream"]["output_tokens"] == 2 * point["stream"]["streams"]  # 2 text events each, usage ignored


def test_an_absurd_server_timing_does_not_stall_the_connection() -> None:
    """``Server-Timing: app;dur=1e308`` is not a duration: ignored, and the connection keeps its pace (it used to
    raise inside the parser callback and leave the connection waiting forever: 2 requests in 3 s, 0% errors)."""
    raw = b"HTTP/1.1 200 OK\r\nServer-Timing: app;dur=1e308, db;dur=inf, ok;dur=2\r\nContent-Length: 2\r\n\r\nok"
    with hostile(respond(raw)) as url:
        point = run_point(RequestSpec(url), concurrency=2, duration_s=0.6, timeout_s=2)
    assert point.errors == {} and point.ok > 50
    assert set(point.stages) == {"ok"} and point.stages["ok"].max_us == 2000
    assert point.network is not None and point.network.count == point.ok


@pytest.mark.parametrize(
    "status_line", [b"HTTP/1.1 000 OK", b"HTTP/1.1 999 Whatever", b"HTTP/1.1 101 Switching Protocols"]
)
def test_a_status_outside_the_final_range_is_a_protocol_error(status_line: bytes) -> None:
    raw = status_line + b"\r\nContent-Length: 2\r\n\r\nok"
    with hostile(respond(raw)) as url:
        point = run_point(RequestSpec(url, capture_headers=()), concurrency=1, requests=5, duration_s=None,
                          timeout_s=2)
    assert point.errors == {"protocol_error": 5} and point.ok == 0 and point.latency.count == 0


def test_a_server_that_only_ever_says_100_continue() -> None:
    """Interim responses without end are a protocol error, not a success (nor a wait for the timeout)."""
    async def forever_continue(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        for _ in range(1000):
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.001)
        return False

    with hostile(forever_continue) as url:
        point = run_point(RequestSpec(url), concurrency=1, requests=3, duration_s=None, timeout_s=5)
    assert point.errors == {"protocol_error": 3} and point.ok == 0
    assert point.error_latency.max_us < 2_000_000  # after a few interim responses, long before the 5 s timeout


def test_one_100_continue_then_silence_ends_at_the_timeout_as_a_protocol_error() -> None:
    async def continue_then_nothing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(30)
        return False

    with hostile(continue_then_nothing) as url:
        point = run_point(RequestSpec(url), concurrency=1, requests=1, duration_s=None, timeout_s=0.3)
    assert point.errors == {"protocol_error": 1}
    # at the timeout from the send (plus the connect, which the latency from the issue time includes)
    assert 300_000 <= point.error_latency.max_us < 450_000


def test_100_continue_before_the_final_response_is_fine() -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    with hostile(respond(raw)) as url:
        point = run_point(RequestSpec(url), concurrency=1, requests=20, duration_s=None, timeout_s=2)
    assert point.errors == {} and point.ok == 20 and point.status_counts == {200: 20}


def never_ending_line(pause_s: float, piece: int) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"8\r\ndata: xx\r\n")
        chunk = f"{piece:x}\r\n".encode() + b"x" * piece + b"\r\n"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            writer.write(chunk)
            await writer.drain()
            await asyncio.sleep(pause_s)
        return False

    return handler


@pytest.mark.parametrize("pure_python", [False, True], ids=["httptools", "pyparser"])
def test_an_sse_line_that_never_ends_is_cut_at_the_line_cap(pure_python: bool) -> None:
    """A stream whose first line never ends, sent as fast as the socket takes it: each request ends at the 1 MiB
    line cap as a protocol error, the point ends on time, memory stays bounded (it took 17.8 s per point against
    a 5 s timeout and 194 MB: the parser re-joined its whole buffer on every chunk)."""
    from infradoctor.load.sse import MAX_LINE_BYTES

    with hostile(never_ending_line(0.0, 65536)) as url:
        spec = RequestSpec(url, method="POST", bodies=[b"{}"], stream=True)
        tracemalloc.start()
        t0 = time.perf_counter()
        try:
            point = run_point(spec, concurrency=1, duration_s=1.0, timeout_s=5, pure_python_parser=pure_python)
        finally:
            took = time.perf_counter() - t0
            peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
    assert set(point.errors) == {"protocol_error"} and point.errors["protocol_error"] >= 1
    assert point.ok == 0 and took < 4.0
    assert peak_mb < 12 * MAX_LINE_BYTES / 2**20, peak_mb  # a few copies of one capped line (server side too)


def test_a_slow_never_ending_line_ends_at_the_timeout() -> None:
    """The same line trickled slowly never reaches the cap: the request's timeout ends it, on time."""
    with hostile(never_ending_line(0.01, 1024)) as url:
        spec = RequestSpec(url, method="POST", bodies=[b"{}"], stream=True)
        point = run_point(spec, concurrency=1, requests=2, duration_s=None, timeout_s=0.4)
    assert point.errors == {"read_timeout": 2}
    assert 400_000 <= point.error_latency.min_us <= point.error_latency.max_us < 500_000


def test_ten_thousand_server_timing_lines_are_read_bounded() -> None:
    raw = (b"HTTP/1.1 200 OK\r\n" + b"Server-Timing: a;dur=1\r\n" * 10_000
           + b"Content-Length: 2\r\n\r\nok")
    with hostile(respond(raw)) as url:
        point = run_point(RequestSpec(url), concurrency=1, duration_s=0.5, timeout_s=2)
    assert point.errors == {} and point.ok > 10
    assert set(point.stages) == {"a"}


def test_garbage_instead_of_http_is_a_protocol_error() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"\x00\xff garbage \r\n\r\n")
        await writer.drain()
        return True

    with hostile(garbage) as url:
        point = run_point(RequestSpec(url, capture_headers=()), concurrency=1, requests=4, duration_s=None,
                          timeout_s=2)
    assert point.errors == {"protocol_error": 4}
