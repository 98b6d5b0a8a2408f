"""Merging the profiler's result, the load metrics and the service evidence (hand-built evidence), and showing it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from infradoctor.findings import Location, make_finding
from infradoctor.profile.metrics import ProfileDistributions, ProfileMetrics
from infradoctor.profile.result import build_result
from infradoctor.profile_load.run import ServiceLoadOptions, merge_results
from infradoctor.report import FORMATS, render
from infradoctor.result import ErrorNote
from infradoctor.serve.looplag import LoopLagEvidence, LoopStall, StackFrame
from infradoctor.serve.workers import WorkerLayout, WorkerProcess
from tests.profile.builders import evidence

SITE = StackFrame("/srv/app/server.py", 21, "predict")


def profile_result():  # type: ignore[no-untyped-def]
    """The profiler's side of a server run (a profile result, its headline and findings set by hand)."""
    result = build_result(evidence(argv=("python", "server.py"), duration_s=9.0), started_at="2026-11-29T10:00:00Z")
    metrics = ProfileMetrics.from_dict(result.metrics)
    metrics = replace(metrics, headline=replace(metrics.headline, steps=120, peak_rss_mb=310.0, p99_ms=999.0),
                      distributions=ProfileDistributions(step_time_ms=(1.0, 2.0)))
    return result.with_(
        metrics=metrics.to_dict(),
        findings=(make_finding("P006", "model loaded 120 times", {"calls": 120}, location=Location("server.py", 30)),),
        errors=(ErrorNote("profile.workload", "stopped"),),
    )


def load_metrics() -> dict:  # type: ignore[type-arg]
    point = {"label": "c=1", "mode": "closed", "concurrency": 1, "offered": 1, "completed": 40, "ok": 40,
             "throughput_rps": 19.0, "goodput_rps": 19.0, "error_rate": 0.0, "errors": {},
             "latency_ms": {"count": 40, "p50": 52.0, "p90": 53.0, "p99": 60.0}, "first_latencies_ms": [55.0]}
    busy = {**point, "label": "c=4", "concurrency": 4, "offered": 4, "throughput_rps": 19.2, "goodput_rps": 19.2,
            "latency_ms": {"count": 40, "p50": 205.0, "p90": 210.0, "p99": 230.0}}
    return {"mode": "closed", "settings": {"timeout_s": 30.0}, "points": [point, busy], "knee": None,
            "headline": {"throughput_rps": 19.2, "p99_ms": 230.0}, "distributions": {"latency_ms": [52.0, 205.0]}}


def loop_evidence() -> LoopLagEvidence:
    stalls = tuple(LoopStall(float(i), 0.2, SITE, (SITE,), 4) for i in range(6))
    return LoopLagEvidence(0.02, 0.1, 6.0, 200, 0.1, 201.0, 205.0, 1.2, 6, stalls, pid=4242, started_unix=1.0)


def layout() -> WorkerLayout:
    return WorkerLayout(100, 100, tuple(WorkerProcess(pid, "python -m uvicorn", 420.0, 380.0, None)
                                        for pid in (101, 102)), gpu_available=False)


def merged():  # type: ignore[no-untyped-def]
    service = {"load_url": "http://127.0.0.1:8000/predict", "ready_url": "http://127.0.0.1:8000/", "ready_s": 2.5,
               "stop_exit_status": 0}
    return merge_results(profile_result(), load_metrics(), [loop_evidence()], layout(), service,
                         [ErrorNote("service.workers", "note")], duration_s=12.3456, cwd="/srv/app")


def test_findings_from_all_sides(result_validator: Callable) -> None:
    result = merged()
    result_validator(result)
    codes = [f.code for f in result.findings]
    assert {"P006", "S001", "S002", "S004"} <= set(codes)
    assert codes.index("S002") < codes.index("S004")  # ranked: high before medium
    s002 = next(f for f in result.findings if f.code == "S002")
    assert s002.location == Location("server.py", 21, function="predict")  # relative to the working folder


def test_metrics_headline_and_distributions() -> None:
    result = merged()
    assert result.duration_s == 12.346
    assert result.target["load_url"] == "http://127.0.0.1:8000/predict"
    headline = result.metrics["headline"]
    assert headline["p99_ms"] == 230.0  # the service's latency wins over a profile key of the same name
    assert headline["steps"] == 120 and headline["workers"] == 2
    assert headline["loop_blocked_s"] == 1.2 and headline["loop_lag_p99_ms"] == 201.0
    assert result.metrics["distributions"] == {"step_time_ms": [1.0, 2.0], "latency_ms": [52.0, 205.0]}
    assert result.metrics["service"]["loop"][0]["pid"] == 4242
    assert result.metrics["service"]["workers"]["supervisor_pid"] == 100
    assert [e.source for e in result.errors] == ["profile.workload", "service.workers"]


def test_flat_throughput_is_not_s001_when_the_server_ran_in_parallel_or_the_machine_was_full() -> None:
    # a thread-pool server on a 2-core box: throughput flat from c=1 because the cores are all busy (the load
    # generator shares them): the flat curve says nothing about one-request-at-a-time serving
    base = {"load_url": "http://127.0.0.1:8000/predict", "ready_url": "http://127.0.0.1:8000/", "ready_s": 2.5,
            "stop_exit_status": 0}
    one_core = {**base, "cpu_at_peak_load": {"server_cpu_percent": 99.0, "machine_cpu_percent": 55.0, "cores": 2}}
    result = merge_results(profile_result(), load_metrics(), [], None, one_core, duration_s=1.0)
    assert "S001" in {f.code for f in result.findings}  # one core's worth: serialized, as the latency shows
    for cpu, said in (({"server_cpu_percent": 160.0, "machine_cpu_percent": 85.0, "cores": 4}, "160% CPU"),
                      ({"server_cpu_percent": 110.0, "machine_cpu_percent": 97.0, "cores": 2}, "97% busy")):
        result = merge_results(profile_result(), load_metrics(), [], None, {**base, "cpu_at_peak_load": cpu},
                               duration_s=1.0)
        assert "S001" not in {f.code for f in result.findings}
        assert said in result.metrics["service"]["s001_not_judged"]
        assert said in render(result, "md")
    # ... unless the server's own code held its event loop (S002): then it serves one request at a time whatever
    # the machine does
    busy = {**base, "cpu_at_peak_load": {"server_cpu_percent": 72.0, "machine_cpu_percent": 100.0, "cores": 2}}
    result = merge_results(profile_result(), load_metrics(), [loop_evidence()], None, busy, duration_s=1.0)
    assert {"S001", "S002"} <= {f.code for f in result.findings}
    assert result.metrics["service"].get("s001_not_judged") is None


def test_without_load_or_service_evidence() -> None:
    result = merge_results(profile_result(), None, [], None, {"load_url": "http://x/"}, duration_s=1.0)
    assert [f.code for f in result.findings] == ["P006"]
    assert result.metrics["load"] is None and result.metrics["service"]["workers"] is None


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "json"])
def test_every_renderer_shows_the_service_sections(fmt: str) -> None:
    text = render(merged(), fmt)
    for title in ("Load points", "Event loop (after start-up)", "Worker processes"):
        assert title in text, title
    assert "server.py:21 (predict)" in text


def test_options_validate_urls() -> None:
    from infradoctor.errors import UsageError

    options = ServiceLoadOptions("http://127.0.0.1:8000/v1/predict?x=1", bodies=(b"{}",))
    assert options.probe_url() == "http://127.0.0.1:8000/"
    spec = options.spec()
    assert spec.method == "POST" and spec.headers["Content-Type"] == "application/json"
    with pytest.raises(UsageError):
        ServiceLoadOptions("http://127.0.0.1:8000/", ready_url="nope").probe_url()
