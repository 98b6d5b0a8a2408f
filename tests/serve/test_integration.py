"""Real uvicorn + FastAPI servers with real PyTorch models (CPU), instrumented with infradoctor.serve."""

from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infradoctor.load.servertiming import parse_server_timing
from infradoctor.serve import LoopLagEvidence
from infradoctor.serve.rules import s002_event_loop_blocked as s002
from tests.serve import apps
from tests.support.servers import python_server

pytestmark = pytest.mark.integration

TOLERANCE_MS = 250.0
"""Upper slack for stage durations on a shared 2-core machine (the lower bound is the known sleep)."""

EARLY_MS = 1.0
"""asyncio may wake a timer up to its clock resolution early (it runs handles due within it)."""


def post(url: str, payload: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
         ) -> tuple[dict[str, Any], dict[str, str]]:
    data = json.dumps(payload or {}).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as response:
        return json.loads(response.read()), {k.lower(): v for k, v in response.headers.items()}


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return str(response.read().decode())


def test_server_timing_matches_known_sleeps_and_prometheus_is_valid(tmp_path: Path) -> None:
    payload = {"x": [0.1] * 128}
    with python_server(apps.INSTRUMENTED, tmp_path, name="instrumented") as server:
        timings = []
        for i in range(5):
            body, headers = post(f"{server.url}/predict", payload, {"X-Request-ID": f"req-{i}"})
            assert len(body["classes"]) == 2
            assert headers["x-request-id"] == f"req-{i}"
            timings.append(parse_server_timing(headers["server-timing"]))
        _, sync_headers = post(f"{server.url}/predict_sync", payload)
        with urllib.request.urlopen(f"{server.url}/stream", timeout=30) as response:
            streamed, stream_timing = response.read(), response.headers["server-timing"]
        exposition = get_text(f"{server.url}/metrics")
        log = server.log_text()

    for stages in timings:
        assert list(stages) == ["preprocess", "inference", "postprocess", "total"]
        assert 30.0 - EARLY_MS <= stages["preprocess"] < 30.0 + TOLERANCE_MS
        assert 60.0 - EARLY_MS <= stages["inference"] < 60.0 + TOLERANCE_MS
        assert 0.0 <= stages["postprocess"] < TOLERANCE_MS
        assert stages["total"] >= stages["preprocess"] + stages["inference"] + stages["postprocess"]
    assert parse_server_timing(sync_headers["server-timing"])["inference"] >= 50.0

    families = {f.name: f for f in text_string_to_metric_families(exposition)}
    requests = {(s.name, s.labels.get("route"), s.labels.get("le")): s.value
                for s in families["infradoctor_request_duration_seconds"].samples}
    assert requests[("infradoctor_request_duration_seconds_count", "/predict", None)] == 5
    assert requests[("infradoctor_request_duration_seconds_bucket", "/predict", "0.075")] == 0  # >= 90 ms each
    assert requests[("infradoctor_request_duration_seconds_bucket", "/predict", "+Inf")] == 5
    assert requests[("infradoctor_request_duration_seconds_count", "/predict_sync", None)] == 1
    stage_counts = {(s.labels["route"], s.labels["stage"]): s.value
                    for s in families["infradoctor_stage_duration_seconds"].samples if s.name.endswith("_count")}
    assert stage_counts[("/predict", "preprocess")] == 5
    assert stage_counts[("/predict", "inference")] == 5
    assert stage_counts[("/predict_sync", "inference")] == 1
    [in_flight] = families["infradoctor_requests_in_flight"].samples
    assert in_flight.value == 0

    assert streamed == b"tok0 tok1 tok2 "
    assert list(parse_server_timing(stream_timing)) == ["prefill", "total"]  # decode runs after the head

    lines = [json.loads(line.split(" ", 1)[1]) for line in log.splitlines()
             if line.startswith("infradoctor.serve.access ")]
    logged = [x for x in lines if x["route"] == "/predict"]
    assert [x["request_id"] for x in logged] == [f"req-{i}" for i in range(5)]
    assert all(x["status"] == 200 and x["stages"]["preprocess"] >= 30.0 - EARLY_MS for x in logged)
    [streamed_line] = [x for x in lines if x["route"] == "/stream"]
    assert streamed_line["stages"]["decode"] >= 3 * 10.0 - EARLY_MS
    assert streamed_line["duration_ms"] >= streamed_line["ttfb_ms"] + 30.0 - EARLY_MS


def drive_and_read_loop(server_url: str, requests: int = 6, concurrency: int = 3) -> LoopLagEvidence:
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda _: post(f"{server_url}/predict"), range(requests)))
    assert len(results) == requests
    time.sleep(0.1)
    return LoopLagEvidence.from_dict(json.loads(get_text(f"{server_url}/debug/loop")))


def test_async_endpoint_blocking_on_model_is_s002_at_the_line(tmp_path: Path) -> None:
    with python_server(apps.BLOCKING_ASYNC, tmp_path, name="blocking_async") as server:
        evidence = drive_and_read_loop(server.url)
        script = next(tmp_path.glob("blocking_async_*.py"))
    [finding] = s002.check(evidence)
    assert finding.location is not None
    assert Path(finding.location.file) == script
    assert finding.location.line == apps.marked_line(script, "BLOCKING-LINE")
    assert finding.location.function == "predict"
    assert finding.evidence["stall_count"] >= 3  # each 200 ms request blocks the loop
    assert finding.evidence["blocked_s"] >= 0.6


def test_sync_endpoint_in_thread_pool_is_not_s002(tmp_path: Path) -> None:
    with python_server(apps.BLOCKING_SYNC, tmp_path, name="blocking_sync") as server:
        evidence = drive_and_read_loop(server.url)
    assert evidence.beats > 0
    assert s002.check(evidence) == []
