"""Server-Timing, SSE and the pure-Python HTTP parser; the pacer; SLO; request bytes."""

from __future__ import annotations

import json

import pytest

from infradoctor.errors import UsageError
from infradoctor.load.pacer import Pacer
from infradoctor.load.pyparser import HttpParserError, PyResponseParser
from infradoctor.load.servertiming import parse_server_timing, server_total_ms, stages_from_headers
from infradoctor.load.spec import RequestSpec, Target, force_stream, openai_default_body
from infradoctor.load.sse import SSEParser
from infradoctor.load.sweep import Slo


def test_server_timing_w3c_examples() -> None:
    assert parse_server_timing("miss, db;dur=53, app;dur=47.2") == {"db": 53.0, "app": 47.2}
    assert parse_server_timing('cache;desc="Cache, Read";dur=23.2') == {"cache": 23.2}
    assert parse_server_timing("db;dur=1, db;dur=2") == {"db": 1.0}
    assert parse_server_timing("x;dur=abc, y;dur=-1, z;dur=2") == {"z": 2.0}
    assert server_total_ms({"db": 5.0, "infer": 10.0}) == 15.0
    assert server_total_ms({"db": 5.0, "total": 20.0}) == 20.0
    assert stages_from_headers({"x-envoy-upstream-service-time": "37"}) == {"envoy_upstream": 37.0}
    assert server_total_ms({}) is None


def test_sse_generic_and_openai_token_counting() -> None:
    generic = SSEParser()
    assert generic.feed(b"data: a\n\ndata: b\r\n\r\nda") == 2
    assert generic.feed(b"ta: c\n") == 0 and generic.feed(b"\n") == 1
    openai = SSEParser(openai=True)
    role = {"choices": [{"delta": {"role": "assistant"}}]}
    text = {"choices": [{"delta": {"content": "hi"}}]}
    legacy = {"choices": [{"text": "hello"}]}
    usage = {"choices": [], "usage": {"completion_tokens": 7}}
    stream = "".join(f"data: {json.dumps(x)}\n\n" for x in (role, text, legacy, usage)) + "data: [DONE]\n\n"
    assert openai.feed(stream.encode()) == 2
    assert openai.usage_tokens == 7 and openai.done and openai.events == 5


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.events.append(("header", name, value))

    def on_headers_complete(self) -> None:
        self.events.append(("headers",))

    def on_body(self, body: bytes) -> None:
        self.events.append(("body", body))

    def on_message_complete(self) -> None:
        self.events.append(("done",))


def bodies(rec: Recorder) -> bytes:
    return b"".join(e[1] for e in rec.events if e[0] == "body")


def test_pyparser_content_length_keepalive_split_anywhere() -> None:
    wire = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer-Timing: a;dur=1\r\n\r\nhelloHTTP/1.1 503 No\r\nContent-Length: 0\r\n\r\n"
    for cut in range(1, len(wire)):
        rec = Recorder()
        parser = PyResponseParser(rec)
        parser.feed_data(wire[:cut])
        parser.feed_data(wire[cut:])
        assert [e for e in rec.events if e[0] == "done"] == [("done",), ("done",)]
        assert bodies(rec) == b"hello"
        assert parser.get_status_code() == 503 and parser.should_keep_alive()


def test_pyparser_chunked_and_close_delimited() -> None:
    rec = Recorder()
    parser = PyResponseParser(rec)
    parser.feed_data(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n")
    assert bodies(rec) == b"hello world" and rec.events[-1] == ("done",)
    rec = Recorder()
    parser = PyResponseParser(rec)
    parser.feed_data(b"HTTP/1.0 200 OK\r\n\r\npartial")
    assert rec.events[-1] != ("done",) and not parser.should_keep_alive()
    assert parser.feed_eof() and rec.events[-1] == ("done",)
    with pytest.raises(HttpParserError):
        PyResponseParser(Recorder()).feed_data(b"SMTP ready\r\n\r\n")


def test_pacer_constant_and_poisson() -> None:
    constant = Pacer(100, "constant")
    assert constant.due(0.0505) == pytest.approx([0.0, 0.01, 0.02, 0.03, 0.04, 0.05])
    poisson = Pacer(1000, "poisson", seed=3)
    times = poisson.due(10.0)
    assert len(times) == pytest.approx(10_000, rel=0.03)
    assert times == sorted(times)
    assert Pacer(1000, "poisson", seed=3).due(10.0) == times
    assert len(Pacer(100).due(100.0, limit=7)) == 7
    with pytest.raises(ValueError):
        Pacer(0)


def test_slo_parse() -> None:
    slo = Slo.parse("p99<500ms")
    assert (slo.percentile, slo.max_ms, slo.max_error_rate) == (99.0, 500.0, 0.01)
    slo = Slo.parse("p95<=0.2s, errors<5%")
    assert (slo.percentile, slo.max_ms, slo.max_error_rate) == (95.0, 200.0, 0.05)
    for bad in ("fast", "p99<5%", "errors<1%", "p100<1s"):
        with pytest.raises(ValueError):
            Slo.parse(bad)


def test_request_bytes_and_target() -> None:
    spec = RequestSpec(
        "http://127.0.0.1:8080/v1/x?a=1", method="post", headers={"X-Id": "7"}, bodies=[b'{"a":1}', b'{"a":22}']
    )
    wire = spec.wire_requests()
    assert len(wire) == 2
    assert wire[0].startswith(b"POST /v1/x?a=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n")
    assert b"X-Id: 7\r\n" in wire[0] and wire[1].endswith(b'Content-Length: 8\r\n\r\n{"a":22}')
    assert RequestSpec("http://h/").wire_requests() == [
        b"GET / HTTP/1.1\r\nHost: h\r\nUser-Agent: "
        + spec.wire_requests()[0].split(b"User-Agent: ")[1].split(b"\r\n")[0]
        + b"\r\nAccept: */*\r\n\r\n"
    ]
    assert Target.parse("https://[::1]:8443/p").host_header == "[::1]:8443"
    for bad in ("ftp://x/", "nohost", "http://h:99999/"):
        with pytest.raises(UsageError):
            Target.parse(bad)
    with pytest.raises(UsageError):
        RequestSpec("http://h/", headers={"X": "a\r\nEvil: 1"}).wire_requests()


def test_openai_bodies() -> None:
    chat = json.loads(openai_default_body("/v1/chat/completions", "m"))
    assert chat["stream"] is True and chat["messages"] and chat["model"] == "m"
    completion = json.loads(openai_default_body("/v1/completions", "m", 8))
    assert completion["prompt"] and completion["max_tokens"] == 8
    assert json.loads(force_stream(b'{"model": "m"}'))["stream"] is True
    assert force_stream(b"not json") == b"not json"


def test_split_and_merge_of_process_shares() -> None:
    from infradoctor.load.engine import PointResult
    from infradoctor.load.multiproc import merge_points, point_from_state, point_state, split

    assert split(32, 3) == [11, 11, 10] and split(1, 2) == [1, 0]
    shares = []
    for k in range(3):
        point = PointResult(
            label=f"s{k}",
            mode="closed",
            concurrency=2,
            rate=None,
            arrivals=None,
            timeout_s=1,
            duration_s=2.0,
            sent=10,
            completed=10,
            ok=9,
            errors={"http_503": 1},
            status_counts={200: 9, 503: 1},
            client_cpu_fraction=0.1 * (k + 1),
        )
        for v in range(9):
            point.latency.record(1000 * (k + 1) + v)
        point.error_latency.record(5000)
        point.windows = [[10.0, 1.0, 100.0, 50.0]]
        shares.append(point_from_state(point_state(point)))
    merged = merge_points(shares, label="c=6", concurrency=6, rate=None)
    assert (merged.sent, merged.completed, merged.ok, merged.errors) == (30, 30, 27, {"http_503": 3})
    assert merged.status_counts == {200: 27, 503: 3}
    assert merged.latency.count == 27 and merged.latency.max_us == 3008 and merged.latency.min_us == 1000
    assert merged.error_latency.count == 3
    assert merged.client_cpu_fraction == pytest.approx(0.3)
    assert merged.windows == [[30.0, 3.0, 300.0, 50.0]]
