"""The ASGI middleware, called directly (no network): request ids, Server-Timing, log lines, metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infradoctor.load.servertiming import parse_server_timing
from infradoctor.serve import ACCESS_LOGGER, ServeMetrics, TimingMiddleware, stage
from tests.serve.asgi import call, response_body, response_headers
from tests.serve.test_stages import FakeClock


def staged_app(clock: FakeClock, *, status: int = 200) -> Any:
    """A raw ASGI app with two stages of known length."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        clock.advance_ms(1)
        with stage("preprocess"):
            clock.advance_ms(5)
        async with stage("inference"):
            clock.advance_ms(20)
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


def metric_samples(exposition: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(exposition.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_server_timing_has_each_stage_and_total() -> None:
    clock = FakeClock()
    app = TimingMiddleware(staged_app(clock), clock=clock)
    messages = asyncio.run(call(app, "/predict"))
    headers = response_headers(messages)
    assert headers["server-timing"] == "preprocess;dur=5.00, inference;dur=20.00, total;dur=26.00"
    assert parse_server_timing(headers["server-timing"]) == {"preprocess": 5.0, "inference": 20.0, "total": 26.0}
    assert headers["content-type"] == "text/plain"
    assert response_body(messages) == b"ok"


def test_request_id_generated_and_echoed() -> None:
    app = TimingMiddleware(staged_app(FakeClock()))
    first = response_headers(asyncio.run(call(app)))["x-request-id"]
    second = response_headers(asyncio.run(call(app)))["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", first) and first != second


@pytest.mark.parametrize(
    "headers,expected",
    [
        ([("X-Request-ID", "abc-123")], "abc-123"),
        ([("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")],
         "4bf92f3577b34da6a3ce929d0e0e4736"),
        ([("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), ("X-Request-ID", "mine")],
         "mine"),
        ([("X-Request-ID", "has space")], None),
        ([("X-Request-ID", "x" * 200)], None),
        ([("traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01")], None),
        ([("traceparent", "garbage")], None),
    ],
)
def test_request_id_from_client(headers: list[tuple[str, str]], expected: str | None) -> None:
    app = TimingMiddleware(staged_app(FakeClock()))
    got = response_headers(asyncio.run(call(app, headers=headers)))["x-request-id"]
    if expected is None:
        assert re.fullmatch(r"[0-9a-f]{32}", got)
    else:
        assert got == expected


def test_one_json_log_line_per_request(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    app = TimingMiddleware(staged_app(clock, status=201), clock=clock)
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER):
        asyncio.run(call(app, "/v1/predict", method="POST", headers=[("X-Request-ID", "req-7")]))
    records = [r for r in caplog.records if r.name == ACCESS_LOGGER]
    assert len(records) == 1
    line = json.loads(records[0].getMessage())
    assert line == {
        "event": "request", "request_id": "req-7", "method": "POST", "route": "/v1/predict",
        "path": "/v1/predict", "status": 201, "duration_ms": 26.0, "ttfb_ms": 26.0,
        "stages": {"preprocess": 5.0, "inference": 20.0},
    }


def test_no_log_work_when_logger_is_off(caplog: pytest.LogCaptureFixture) -> None:
    app = TimingMiddleware(staged_app(FakeClock()))
    with caplog.at_level(logging.WARNING, logger=ACCESS_LOGGER):
        asyncio.run(call(app))
    assert not [r for r in caplog.records if r.name == ACCESS_LOGGER]


def test_streaming_body_stages_after_head_go_to_log_only(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()

    async def streaming(scope: dict[str, Any], receive: Any, send: Any) -> None:
        with stage("prefill"):
            clock.advance_ms(30)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(3):
            with stage("decode"):
                clock.advance_ms(10)
            await send({"type": "http.response.body", "body": f"tok{i} ".encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    app = TimingMiddleware(streaming, clock=clock)
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER):
        messages = asyncio.run(call(app, "/stream"))
    assert response_headers(messages)["server-timing"] == "prefill;dur=30.00, total;dur=30.00"
    assert response_body(messages) == b"tok0 tok1 tok2 "
    line = json.loads(caplog.records[-1].getMessage())
    assert line["stages"] == {"prefill": 30.0, "decode": 30.0}
    assert line["ttfb_ms"] == 30.0 and line["duration_ms"] == 60.0


def test_prometheus_metrics_and_metrics_route() -> None:
    clock = FakeClock()
    metrics = ServeMetrics()
    app = TimingMiddleware(staged_app(clock), metrics=metrics, metrics_path="/metrics", clock=clock)

    async def run() -> list[dict[str, Any]]:
        for _ in range(3):
            await call(app, "/predict", method="POST")
        await call(app, "/health")
        return await call(app, "/metrics")

    messages = asyncio.run(run())
    headers = response_headers(messages)
    assert headers["content-type"].startswith("text/plain")
    assert "server-timing" not in headers
    samples = metric_samples(response_body(messages))
    route = (("method", "POST"), ("route", "/predict"), ("status", "200"))
    assert samples[("infradoctor_request_duration_seconds_count", route)] == 3
    assert samples[("infradoctor_request_duration_seconds_sum", route)] == pytest.approx(3 * 0.026)
    assert samples[("infradoctor_request_duration_seconds_bucket", (("le", "0.025"), *route))] == 0
    assert samples[("infradoctor_request_duration_seconds_bucket", (("le", "0.05"), *route))] == 3
    stage_key = (("route", "/predict"), ("stage", "inference"))
    assert samples[("infradoctor_stage_duration_seconds_count", stage_key)] == 3
    assert samples[("infradoctor_stage_duration_seconds_sum", stage_key)] == pytest.approx(0.060)
    assert samples[("infradoctor_request_duration_seconds_count",
                    (("method", "GET"), ("route", "/health"), ("status", "200")))] == 1
    assert samples[("infradoctor_requests_in_flight", ())] == 0


def test_in_flight_gauge_counts_open_requests() -> None:
    metrics = ServeMetrics()
    seen: list[float] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(metrics.in_flight._value.get())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    wrapped = TimingMiddleware(app, metrics=metrics)
    asyncio.run(call(wrapped))
    assert seen == [1.0]
    assert metrics.in_flight._value.get() == 0


def test_exception_is_logged_as_500_and_reraised(caplog: pytest.LogCaptureFixture) -> None:
    metrics = ServeMetrics()

    async def broken(scope: dict[str, Any], receive: Any, send: Any) -> None:
        with stage("inference"):
            raise RuntimeError("model exploded")

    app = TimingMiddleware(broken, metrics=metrics)
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER), pytest.raises(RuntimeError):
        asyncio.run(call(app, "/predict"))
    line = json.loads(caplog.records[-1].getMessage())
    assert line["status"] == 500 and "inference" in line["stages"]
    assert metrics.in_flight._value.get() == 0


def test_fastapi_route_template_is_the_label(caplog: pytest.LogCaptureFixture) -> None:
    fastapi = pytest.importorskip("fastapi")
    api = fastapi.FastAPI()

    @api.get("/items/{item_id}")
    async def item(item_id: int) -> dict[str, int]:
        with stage("lookup"):
            pass
        return {"item_id": item_id}

    @api.get("/sync/{name}")
    def sync_item(name: str) -> dict[str, str]:
        with stage("threaded"):
            pass
        return {"name": name}

    api.add_middleware(TimingMiddleware)
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER):
        first = asyncio.run(call(api, "/items/42"))
        second = asyncio.run(call(api, "/sync/bob"))
        missing = asyncio.run(call(api, "/nope"))
    assert json.loads(response_body(first)) == {"item_id": 42}
    assert "lookup" in parse_server_timing(response_headers(first)["server-timing"])
    assert "threaded" in parse_server_timing(response_headers(second)["server-timing"])
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == ACCESS_LOGGER]
    assert [(x["route"], x["status"]) for x in lines] == [("/items/{item_id}", 200), ("/sync/{name}", 200),
                                                          ("/nope", 404)]
    assert response_headers(missing)["x-request-id"]


def test_raw_path_labels_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    from infradoctor.serve import middleware

    app = TimingMiddleware(staged_app(FakeClock()))
    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER):
        async def run() -> None:
            for i in range(middleware.MAX_ROUTE_LABELS + 5):
                await call(app, f"/user/{i}")

        asyncio.run(run())
    routes = [json.loads(r.getMessage())["route"] for r in caplog.records if r.name == ACCESS_LOGGER]
    assert routes[0] == "/user/0"
    assert routes[-5:] == ["other"] * 5


def test_non_http_scopes_pass_through() -> None:
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    asyncio.run(TimingMiddleware(app)({"type": "lifespan"}, None, None))  # type: ignore[arg-type]
    assert seen == ["lifespan"]


def test_metrics_path_needs_metrics() -> None:
    with pytest.raises(ValueError):
        TimingMiddleware(staged_app(FakeClock()), metrics_path="/metrics")


MULTIPROCESS_SERVER = '''
import os, sys
from pathlib import Path

here = Path(__file__).resolve().parent
prom = here / "prom"
prom.mkdir(exist_ok=True)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(prom)  # before prometheus_client is imported, as it requires
(here / "mpapp.py").write_text("""
import os
from fastapi import FastAPI
from infradoctor.serve import ServeMetrics, TimingMiddleware

app = FastAPI()
app.add_middleware(TimingMiddleware, metrics=ServeMetrics(), metrics_path="/metrics")


@app.get("/")
def root() -> dict:
    return {"pid": os.getpid()}
""")
sys.path.insert(0, str(here))

import uvicorn

if __name__ == "__main__":
    uvicorn.run("mpapp:app", host="127.0.0.1", port=int(sys.argv[1]), workers=2, log_level="warning")
'''


@pytest.mark.integration
def test_metrics_of_several_uvicorn_workers_add_up_in_multiprocess_mode(tmp_path) -> None:
    """uvicorn --workers 2 with PROMETHEUS_MULTIPROC_DIR: /metrics from either worker counts both workers' requests."""
    from infradoctor.procs import http_get
    from tests.support.servers import python_server

    with python_server(MULTIPROCESS_SERVER, tmp_path, ready_path="/metrics", name="mp") as server:
        base = f"http://127.0.0.1:{server.port}"
        pids: set[int] = set()
        sent = 0
        while len(pids) < 2 and sent < 400:  # new connections until both workers have answered
            answer = http_get(f"{base}/", timeout=5.0, max_body=100)
            sent += 1
            assert answer.status == 200, answer.reason
            pids.add(json.loads(answer.body)["pid"])
        assert len(pids) == 2, f"one worker took all {sent} connections"
        def scraped_count() -> tuple[float, str]:
            text = http_get(f"{base}/metrics", timeout=5.0, max_body=1_000_000).body.decode()
            counts = [
                sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if sample.name == "infradoctor_request_duration_seconds_count" and sample.labels.get("route") == "/"
            ]
            return sum(counts), text

        # A request is counted once its response is sent: under load the last one may land a moment after the
        # client saw it, so wait (bounded) until the count is complete, then check every scrape agrees.
        deadline = time.monotonic() + 10.0
        while scraped_count()[0] < sent and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(4):  # whichever worker answers the scrape
            count, text = scraped_count()
            assert count == sent, text


def test_multiprocess_mode_follows_prometheus_client_not_a_late_environment_variable(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))  # set after prometheus_client was imported
    metrics = ServeMetrics()
    assert not metrics.multiprocess  # values still live in this process: its own exposition shows them
    metrics.observe("/", "GET", 200, 0.01, {})
    assert b"infradoctor_request_duration_seconds_count" in metrics.exposition()[0]
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="existing directory"):
        ServeMetrics(multiprocess=True)
