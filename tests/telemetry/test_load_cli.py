"""``infradoctor load --router-stats/--server-metrics``: the sweep's point observer against real servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infradoctor.procs import free_port
from tests.route.servers import backends, envoy_config
from tests.support.servers import envoy, python_server
from tests.telemetry.model_server import SCRIPT

pytestmark = pytest.mark.integration


def load(cli: Any, tmp_path: Path, *args: str, validator: Any) -> dict[str, Any]:
    out = tmp_path / f"load_{free_port()}.json"
    run = cli("load", *args, "--json", str(out), "--quiet", "--stats-interval", "0.25")
    assert run.exit_code == 0, run.stderr
    data: dict[str, Any] = json.loads(out.read_text())
    validator(data)
    return data


def test_load_ties_client_latency_to_the_model_servers_queue(cli, tmp_path, result_validator) -> None:
    args = ["--flavour", "vllm", "--max-batch", "4", "--kv-blocks", "64", "--step-ms", "5"]
    with python_server(SCRIPT, tmp_path, args=args, ready_path="/health", name="model_server") as server:
        result = load(cli, tmp_path, server.url + "/predict", "--body-json", "{}", "-c", "1,16", "--duration", "1.5",
                      "--server-metrics", server.url + "/metrics", validator=result_validator)
    points = result["metrics"]["points"]
    observed = [p["observations"]["telemetry"]["servers"][0] for p in points]
    assert [o["kind"] for o in observed] == ["vllm", "vllm"]
    assert observed[0]["waiting_max"] <= 1 and observed[1]["waiting_max"] >= 8  # 16 clients, a batch of 4
    s010 = next(f for f in result["findings"] if f["code"] == "S010")
    assert s010["evidence"]["point"] == "c=16" and s010["evidence"]["metric"] == "vllm:num_requests_waiting"
    assert "when the waiting queue reached" in s010["title"]


def test_load_names_envoys_own_rejections(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 20}]) as bs:
        admin = free_port()
        conf = envoy_config([f"127.0.0.1:{bs[0].port}"], admin_port=admin, max_connections=1, max_pending=2)
        with envoy(conf, tmp_path, admin_port=admin) as r:
            result = load(cli, tmp_path, r.url + "/predict", "-c", "8", "--duration", "2",
                          "--router-stats", f"http://127.0.0.1:{admin}", validator=result_validator)
    errors = result["metrics"]["points"][0]["errors"]
    r013 = next(f for f in result["findings"] if f["code"] == "R013")
    assert r013["evidence"]["cause"] == "pending_overflow" and r013["evidence"]["rejected"] == errors["http_503"]
    assert "R009" in {f["code"] for f in result["findings"]}
    router = result["metrics"]["points"][0]["observations"]["telemetry"]["routers"][0]
    assert router["kind"] == "envoy" and router["counters"]["pending_overflow"] > 0


def test_a_stats_endpoint_that_does_not_answer_is_a_note(cli, tmp_path, result_validator) -> None:
    with backends(tmp_path, [{"latency_ms": 2}]) as bs:
        result = load(cli, tmp_path, bs[0].url + "/predict", "-c", "2", "--duration", "1",
                      "--router-stats", f"http://127.0.0.1:{free_port()}", validator=result_validator)
    notes = [e for e in result["errors"] if e["source"] == "load.router-stats"]
    assert len(notes) == 1 and "could not be read" in notes[0]["message"]
    assert result["metrics"]["points"][0]["ok"] > 0
