"""Long fuzz run of the load engine's parsers of peer input: cases, crashes, slowest case, peak memory.

Per parser `--cases` (100k) inputs, each a seed (a real SSE stream, HTTP response or Server-Timing value) mutated
1-4 times by a seeded generator: bytes flipped, format tokens inserted, ranges deleted, truncated, and ranges
repeated up to a thousand times (blow-ups of up to a few MB: where a quadratic parser shows), then cut into random
reads. Parsers: the SSE parser (generic and OpenAI), the Server-Timing / Envoy header parsers, the pure-Python HTTP
response parser, the compiled scanner, captured-header reading, and a whole connection over httptools and over the
Python parser (statuses, framing, streaming, classification). A crash is any exception other than the documented
one (SSEError, HttpParserError); a connection may raise nothing. Time per case is process CPU time (other load on
the machine does not count), taken on the cases run without tracing; the worst case is run again 3 times and the
goal judged on the least (a garbage-collection pass can fall into one case: 18 ms of CPU once, 0.6 ms again, for a
15 KB OpenAI stream); peak memory is the tracemalloc peak of a case, traced for every tenth case and every input of
100 KB and more.

Goals (issue 17): 0 crashes, 0 hangs; <= 50 ms per 100 KB of input; peak memory <= 3x the input + 100 MB.

Usage: `python benchmarks/run.py fuzz_load [--cases 100000] [--seed 17] [--only sse]`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from infradoctor.load import client  # noqa: E402
from infradoctor.load.pyparser import HttpParserError, PyResponseParser  # noqa: E402
from infradoctor.load.servertiming import parse_envoy_upstream_time, parse_server_timing  # noqa: E402
from infradoctor.load.sse import SSEError, SSEParser  # noqa: E402

CHUNK = json.dumps({"choices": [{"delta": {"content": "token"}}]}).encode()
SSE_SEEDS = [
    b"".join(b"data: " + CHUNK + b"\n\n" for _ in range(5)) + b'data: {"usage": {"completion_tokens": 5}}\n\n'
    b"data: [DONE]\n\n",
    b"event: message\r\nid: 1\r\ndata: hello\r\ndata: world\r\n\r\n: keep-alive\r\n\r\n",
    b"data: a\rdata: b\r\rretry: 10\r\r",
    b'data: {"choices": [{"text": "x"}], "usage": {"completion_tokens": ' + b"9" * 4000 + b"}}\n\n",
]
HTTP_SEEDS = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer-Timing: db;dur=5, app;dur=12\r\n\r\nhello",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream\r\n\r\n"
    + b"".join(b"%x\r\n" % (len(c) + 8) + b"data: " + c + b"\n\n" + b"\r\n" for c in (CHUNK, CHUNK)) + b"0\r\n\r\n",
    b"HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\n\r\nbody until close",
    b"HTTP/1.1 000 OK\r\nx-envoy-upstream-service-time: 12\r\nContent-Length: 2\r\n\r\nok",
]
TIMING_SEEDS = [b'db;dur=53, app;desc="model, v2";dur=47.2, miss', b"total;dur=1e308", b"cache;desc=\"a\\\"b\";dur=2"]
TOKENS = [b"\r\n", b"\n", b"\r", b"\r\n\r\n", b"data: ", b":", b";", b",", b"=", b'"', b"\\", b"dur=", b"[DONE]",
          b"HTTP/1.1 ", b"100", b"000", b"999", b"Content-Length: ", b"Transfer-Encoding: chunked", b"0\r\n\r\n",
          b"ffffffffffff", b"1e308", b"-1", b"9" * 500, b"[" * 100, b"\x00", b"\xff", b"Connection: close"]


def mutate(rng: random.Random, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        at = rng.randint(0, len(data))
        if kind < 0.25 and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randint(0, 7)
        elif kind < 0.5:
            data[at:at] = rng.choice(TOKENS)
        elif kind < 0.65:
            del data[at : at + rng.randint(1, 16)]
        elif kind < 0.75:
            del data[at:]
        elif len(data) < 1 << 20:
            piece = bytes(data[at : at + rng.randint(1, 64)]) or rng.choice(TOKENS)
            times = rng.choice((2, 10, 100, 1000, 1000))
            data[at:at] = piece * min(times, (1 << 21) // max(1, len(piece)))
    return bytes(data)


def reads(rng: random.Random, data: bytes) -> Iterator[bytes]:
    """``data`` in reads of one size per case (1 byte to 64 KB), at most ~1000 reads: the cost per read (a call
    per packet) is the event loop's as much as the parser's, and is not what this run measures."""
    size = max(rng.choice((1, 7, 64, 1500, 16384, 65536)), len(data) // 1000)
    for start in range(0, len(data), size):
        yield data[start : start + size]


class Tally:
    """What the run of one parser found (a plain class: benchmarks/run.py loads modules outside sys.modules)."""

    def __init__(self) -> None:
        self.cases = 0
        self.crashes: list[str] = []
        self.slowest_s = 0.0
        self.slowest_size = 0
        self.worst_rate = 0.0
        """Slowest seconds per 100 KB among inputs of 10 KB and more."""
        self.worst_rate_size = 0
        self.worst_case: tuple[bytes, object] | None = None
        """The input of the worst rate and the generator's state before its run (to run it again)."""
        self.worst_retimed = 0.0
        """The worst rate's input run again 3 times (least seconds per 100 KB): a garbage-collection pass that
        fell into the case is not the parser's cost."""
        self.peak = 0
        self.peak_size = 0
        self.worst_ratio = 0.0
        """Largest peak / input among inputs of 100 KB and more."""


class _Driver:
    def on_response(self, conn: client.Connection) -> None:
        if not 200 <= conn.status <= 599:
            raise AssertionError(f"a response with status {conn.status}")
        conn.busy = True

    def on_failure(self, conn: client.Connection, error_class: str) -> None:
        pass

    def on_closed(self, conn: client.Connection) -> None:
        pass


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


def sse_target(openai: bool) -> Callable[[random.Random, bytes], None]:
    def run(rng: random.Random, data: bytes) -> None:
        parser = SSEParser(openai=openai)
        try:
            for chunk in reads(rng, data):
                parser.feed(chunk)
        except SSEError:
            pass

    return run


def timing_target(rng: random.Random, data: bytes) -> None:
    text = data.decode("latin-1")
    parse_server_timing(text)
    parse_envoy_upstream_time(text)


def pyparser_target(rng: random.Random, data: bytes) -> None:
    class Callbacks:
        def on_body(self, body: bytes) -> None:
            pass

        def on_message_complete(self) -> None:
            pass

    parser = PyResponseParser(Callbacks())
    try:
        for chunk in reads(rng, data):
            parser.feed_data(chunk)
        parser.feed_eof()
    except HttpParserError:
        pass


def scan_target(rng: random.Random, data: bytes) -> None:
    assert client._fastpath is not None
    if client._fastpath.scan(data, (b"server-timing",)) not in (-1, 0, 1):
        raise AssertionError("scan returned something else")


def headers_target(rng: random.Random, data: bytes) -> None:
    client.read_headers(data[:65536], frozenset({b"server-timing", b"x-envoy-upstream-service-time"}))


def connection_target(stream: bool, pure_python: bool) -> Callable[[random.Random, bytes], None]:
    cls = client.connection_class(capture=frozenset({b"server-timing"}), stream=stream, openai=stream,
                                  pure_python=pure_python)

    def run(rng: random.Random, data: bytes) -> None:
        conn = cls(_Driver(), 0)  # type: ignore[arg-type]
        conn.connection_made(_Transport())  # type: ignore[arg-type]
        conn.send(b"GET / HTTP/1.1\r\n\r\n", 0.0, 0)
        for chunk in reads(rng, data):
            conn.data_received(chunk)
        conn.eof_received()
        conn.connection_lost(None)

    return run


def targets() -> dict[str, tuple[list[bytes], Callable[[random.Random, bytes], None]]]:
    out: dict[str, tuple[list[bytes], Callable[[random.Random, bytes], None]]] = {
        "sse": (SSE_SEEDS, sse_target(False)),
        "sse_openai": (SSE_SEEDS, sse_target(True)),
        "server_timing": (TIMING_SEEDS, timing_target),
        "http_python_parser": (HTTP_SEEDS, pyparser_target),
        "captured_headers": (HTTP_SEEDS, headers_target),
        "connection_httptools": (HTTP_SEEDS + SSE_SEEDS, connection_target(True, False)),
        "connection_python": (HTTP_SEEDS + SSE_SEEDS, connection_target(True, True)),
    }
    if client._fastpath is not None:
        out["compiled_scanner"] = (HTTP_SEEDS, scan_target)
    return out


def fuzz(name: str, seeds: list[bytes], target: Callable[[random.Random, bytes], None], cases: int,
         seed: int) -> Tally:
    rng = random.Random(f"{seed}:{name}")
    tally = Tally()
    for i in range(cases):
        data = mutate(rng, rng.choice(seeds))
        size = len(data)
        traced = i % 10 == 0 or size >= 100_000
        if traced:
            tracemalloc.start()
        state = rng.getstate()
        t0 = time.process_time()
        try:
            target(rng, data)
        except Exception as exc:  # noqa: BLE001 - a crash is what this run counts
            tally.crashes.append(f"{type(exc).__name__}: {exc} (input {data[:80]!r}...)"
                                 if len(tally.crashes) < 5 else "")
        took = time.process_time() - t0
        tally.cases += 1
        if traced:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            if peak > tally.peak:
                tally.peak, tally.peak_size = peak, size
            if size >= 100_000 and peak / size > tally.worst_ratio:
                tally.worst_ratio = peak / size
            continue
        if took > tally.slowest_s:
            tally.slowest_s, tally.slowest_size = took, size
        if size >= 10_000 and took / size * 100_000 > tally.worst_rate:
            tally.worst_rate, tally.worst_rate_size = took / size * 100_000, size
            tally.worst_case = (data, state)
    if tally.worst_case is not None:
        data, state = tally.worst_case
        times = []
        for _ in range(3):
            again = random.Random()
            again.setstate(state)  # type: ignore[arg-type]
            t0 = time.process_time()
            with contextlib.suppress(Exception):  # counted above
                target(again, data)
            times.append(time.process_time() - t0)
        tally.worst_retimed = min(times) / len(data) * 100_000
    return tally


def machine_speed() -> float:
    """Microseconds of CPU this machine takes to ``json.loads`` one small OpenAI chunk (the SSE parsers' unit of
    work per event; about 1.5 us on an idle modern core), to read the rates below against."""
    t0 = time.process_time()
    for _ in range(20_000):
        json.loads(CHUNK)
    return (time.process_time() - t0) / 20_000 * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000, help="cases per parser")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--only", action="append", default=[], help="run only these parsers")
    args = parser.parse_args(argv)
    print(f"machine: json.loads of one {len(CHUNK)}-byte chunk takes {machine_speed():.1f} us of CPU "
          "(about 1.5 us on an idle modern core: scale the rates below by it)", flush=True)
    failed = False
    for name, (seeds, target) in targets().items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        tally = fuzz(name, seeds, target, args.cases, args.seed)
        ok = (not tally.crashes and tally.worst_retimed <= 0.05
              and tally.peak <= 3 * tally.peak_size + 100 * 2**20)
        failed |= not ok
        print(
            f"{name}: {tally.cases:,} cases in {time.perf_counter() - t0:.0f} s, {len(tally.crashes)} crashes; "
            f"slowest case {tally.slowest_s * 1000:.1f} ms ({tally.slowest_size:,} bytes); worst rate "
            f"{tally.worst_rate * 1000:.1f} ms per 100 KB ({tally.worst_rate_size:,} bytes), re-timed "
            f"{tally.worst_retimed * 1000:.1f} (goal <= 50); peak "
            f"memory {tally.peak / 2**20:.1f} MB ({tally.peak_size:,} bytes of input; goal <= 3x + 100 MB), worst "
            f"peak/input {tally.worst_ratio:.2f}x on inputs >= 100 KB" + ("" if ok else "  FAILS A GOAL"),
            flush=True,
        )
        for crash in [c for c in tally.crashes if c]:
            print(f"  crash: {crash}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
