"""A load sweep against a real queueing model server, its own metrics sampled point by point.

The server's queue, batcher and KV budget fill and drain under the load (tests/telemetry/model_server.py); the
findings must name what its metrics show at the point where the client's latency rose.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from infradoctor.load.engine import PointResult
from infradoctor.load.spec import RequestSpec
from infradoctor.load.sweep import run_sweep
from infradoctor.telemetry.sweep import SweepTelemetry, SweepTelemetryOutcome
from tests.support.servers import python_server
from tests.telemetry.model_server import SCRIPT

pytestmark = pytest.mark.integration


def sweep(tmp_path: Path, server_args: list[str], levels: list[int]) -> SweepTelemetryOutcome:
    with python_server(SCRIPT, tmp_path, args=server_args, ready_path="/health", name="model_server") as server:
        telemetry = SweepTelemetry(server_metrics=[server.url + "/metrics"], interval_s=0.25, timeout_s=0.5)
        telemetry.start()

        def on_point(point: PointResult) -> None:
            p50, p99 = (v / 1000.0 for v in point.latency.percentiles_us([50.0, 99.0]))
            telemetry.point_done(point.label, concurrency=point.concurrency, requests=point.ok, p50_ms=p50,
                                 p99_ms=p99, elapsed_s=point.elapsed_s)

        spec = RequestSpec(url=server.url + "/predict", method="POST", bodies=(b"{}",))
        run_sweep(spec, concurrency=levels, duration_s=1.5, on_point=on_point)
        return telemetry.finish()


def codes(outcome: SweepTelemetryOutcome) -> dict[str, str]:
    return {f.code: f.title for f in outcome.findings}


def test_vllm_queue_kv_cache_and_preemptions_under_load(tmp_path: Path) -> None:
    args = ["--flavour", "vllm", "--max-batch", "12", "--kv-blocks", "36", "--output-tokens", "32", "--step-ms", "5"]
    outcome = sweep(tmp_path, args, [1, 8, 16, 32])
    points = outcome.metrics.servers[0].points
    assert outcome.metrics.servers[0].kind == "vllm" and [p.label for p in points] == ["c=1", "c=8", "c=16", "c=32"]
    first, last = points[0].server, points[-1].server
    # one client: at most its own request waits (for the next scheduler step, when a read lands then)
    assert first.waiting_max is not None and first.waiting_max <= 1
    assert first.kv_cache_usage_max is not None and first.kv_cache_usage_max < 0.2
    assert last.waiting_max is not None and last.waiting_max >= 10 and last.kv_cache_usage_max == 1.0
    assert last.queue_time_ms is not None and last.queue_time_ms > 5 * (first.queue_time_ms or 1.0)
    found = codes(outcome)
    assert {"S010", "S011", "S012"} <= set(found), found
    assert "when the waiting queue reached" in found["S010"] and "KV-cache usage reached 100%" in found["S010"]
    assert found["S012"].startswith("Preemptions started at concurrency ")
    assert "S013" not in found  # it batches up to 12
    assert outcome.notes == []


def test_vllm_v0_names_are_read_too(tmp_path: Path) -> None:
    args = ["--flavour", "vllm-v0", "--max-batch", "4", "--kv-blocks", "64", "--step-ms", "5"]
    outcome = sweep(tmp_path, args, [1, 16])
    server = outcome.metrics.servers[0]
    assert server.points[-1].server.names["kv_cache_usage"] == "vllm:gpu_cache_usage_perc"
    assert "S010" in codes(outcome)  # 16 clients, a batch of 4: the queue is the latency


def test_triton_without_batching(tmp_path: Path) -> None:
    outcome = sweep(tmp_path, ["--flavour", "triton", "--max-batch", "1", "--step-ms", "5"], [1, 8])
    found = codes(outcome)
    assert "S013" in found and "batch items per execution 1.00" in found["S013"]
    assert outcome.metrics.servers[0].points[-1].server.batch_size_mean == 1.0


def test_tgi_batches_and_nothing_is_wrong_at_light_load(tmp_path: Path) -> None:
    outcome = sweep(tmp_path, ["--flavour", "tgi", "--max-batch", "16", "--kv-blocks", "256", "--step-ms", "5"],
                    [1, 4])
    assert outcome.metrics.servers[0].kind == "tgi"
    assert outcome.findings == [], [f.title for f in outcome.findings]
    assert outcome.metrics.servers[0].points[-1].server.running_max == 4


def test_the_load_observer_records_each_point_and_judges_the_sweep(tmp_path: Path) -> None:
    from infradoctor.load.engine import run_point
    from infradoctor.telemetry.observer import TelemetryObserver

    args = ["--flavour", "vllm", "--max-batch", "4", "--kv-blocks", "64", "--step-ms", "5"]
    with python_server(SCRIPT, tmp_path, args=args, ready_path="/health", name="model_server") as server:
        observer = TelemetryObserver(server_metrics=[server.url + "/metrics"], interval_s=0.25, timeout_s=0.5)
        observer.start()
        spec = RequestSpec(url=server.url + "/predict", method="POST", bodies=(b"{}",))
        observed = []
        for level in (1, 16):  # what the sweep does around each point
            observer.point_started(f"c={level}", float(level), "closed")
            point = run_point(spec, concurrency=level, duration_s=1.5)
            observed.append(observer.point_finished(point))
        findings = observer.findings(None)
    assert [o["servers"][0]["kind"] for o in observed if o] == ["vllm", "vllm"]
    assert observed[1] is not None and observed[1]["servers"][0]["waiting_max"] >= 8  # 16 clients, 4 running
    assert "S010" in {f.code for f in findings}
    assert observer.notes == []
