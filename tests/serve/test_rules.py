"""S002 and S004 on evidence built by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infradoctor.findings import Severity
from infradoctor.serve.looplag import BusySample, LoopLagEvidence, LoopStall, StackFrame
from infradoctor.serve.rules import s002_event_loop_blocked as s002
from infradoctor.serve.rules import s004_model_copy_per_worker as s004
from infradoctor.serve.workers import WorkerLayout, WorkerProcess

HANDLER = StackFrame("/srv/app.py", 31, "predict")
TOKENIZE = StackFrame("/srv/text.py", 8, "tokenize")


def stall(site: StackFrame | None, duration: float, at: float = 1.0) -> LoopStall:
    stack = (site, StackFrame("/usr/lib/python3.11/asyncio/events.py", 80, "_run")) if site else ()
    return LoopStall(started_s=at, duration_s=duration, site=site, stack=stack, samples=3)


def loop_evidence(*stalls: LoopStall, observed_s: float = 10.0) -> LoopLagEvidence:
    return LoopLagEvidence(
        interval_s=0.02, stall_threshold_s=0.1, observed_s=observed_s, beats=400, lag_p50_ms=0.1,
        lag_p99_ms=max((s.duration_s * 1000 for s in stalls), default=0.2),
        lag_max_ms=max((s.duration_s * 1000 for s in stalls), default=0.3),
        blocked_s=sum(s.duration_s for s in stalls), stall_count=len(stalls), stalls=stalls,
    )


def test_s002_points_at_the_site_that_blocked_longest() -> None:
    evidence = loop_evidence(stall(TOKENIZE, 0.15), stall(HANDLER, 0.4), stall(HANDLER, 0.5), stall(None, 0.3))
    [finding] = s002.check(evidence)
    assert finding.code == "S002" and finding.name == "event-loop-blocked"
    assert finding.location is not None
    assert (finding.location.file, finding.location.line, finding.location.function) == ("/srv/app.py", 31,
                                                                                        "predict")
    assert finding.severity == Severity.HIGH  # 1.35 s of 10 s
    assert finding.evidence["stall_count"] == 4
    assert finding.evidence["sites"][0] == {"site": "/srv/app.py:31", "function": "predict", "stalls": 2,
                                            "blocked_s": 0.9, "busy_probes": 0}
    assert finding.evidence["sites"][-1]["site"] is None
    assert finding.evidence["stack"][0] == "/srv/app.py:31 in predict"
    assert "in predict()" in finding.title
    assert finding.impact is not None and 0.13 < finding.impact < 0.14


def test_s002_medium_when_a_small_share_of_time() -> None:
    evidence = replace(loop_evidence(stall(HANDLER, 0.3), observed_s=60.0), lag_p99_ms=12.0)
    [finding] = s002.check(evidence)
    assert finding.severity == Severity.MEDIUM
    # a lag p99 of 100 ms or more is felt by every request: high
    [finding] = s002.check(replace(evidence, lag_p99_ms=140.0))
    assert finding.severity == Severity.HIGH


ENDPOINT = StackFrame("/srv/app.py", 58, "predict", coroutine=True)


def test_s002_short_frequent_blocks_from_busy_probes() -> None:
    # an async def endpoint that sleeps 20 ms per request: no stall reaches 100 ms, but the busy probes find the
    # endpoint on the loop 45% of the time and the lag's p99 is 87 ms (issue 18's server)
    busy = tuple(BusySample(0.05 * i, ENDPOINT if i % 20 < 9 else None) for i in range(400))
    evidence = replace(loop_evidence(observed_s=20.0), lag_p99_ms=87.0, probes=400, busy=busy, busy_count=400)
    [finding] = s002.check(evidence)
    assert (finding.location.file, finding.location.line, finding.location.function) == ("/srv/app.py", 58,
                                                                                        "predict")
    assert finding.severity == Severity.MEDIUM and finding.impact == 0.45
    assert finding.evidence["busy_user_share"] == 0.45 and finding.evidence["sites"][0]["busy_probes"] == 180
    assert "45% of the time" in finding.title and "p99 87 ms" in finding.title
    # the same share with a loop that never lags is not felt: no finding; nor is a small share
    assert s002.check(replace(evidence, lag_p99_ms=4.0)) == []
    few = tuple(BusySample(0.05 * i, ENDPOINT if i % 20 < 3 else None) for i in range(400))
    assert s002.check(replace(evidence, busy=few)) == []


def test_s002_quiet_without_enough_blocking() -> None:
    assert s002.check(loop_evidence()) == []
    assert s002.check(loop_evidence(stall(HANDLER, 0.12))) == []
    assert s002.check(loop_evidence(stall(HANDLER, 0.12)), s002.Options(min_blocked_s=0.1)) != []


def test_s002_without_a_user_frame_has_no_location() -> None:
    [finding] = s002.check(loop_evidence(stall(None, 0.5)))
    assert finding.location is None


def worker(pid: int, *, private: float | None, gpu: float | None = None) -> WorkerProcess:
    return WorkerProcess(pid, "python -m uvicorn app:app", rss_mb=(private or 0) + 40, private_mb=private,
                         gpu_memory_mb=gpu)


def test_s004_host_copies() -> None:
    layout = WorkerLayout(100, 100, (worker(101, private=410.0), worker(102, private=395.5),
                                     worker(103, private=402.0)), gpu_available=False)
    [finding] = s004.check(layout)
    assert finding.code == "S004" and finding.severity == Severity.MEDIUM
    assert finding.evidence["basis"] == "host"
    assert finding.evidence["workers"] == 3
    assert finding.evidence["duplicated_mb"] == round(2 * 395.5, 1)
    assert "3 worker processes" in finding.title


def test_s004_gpu_copies_are_high() -> None:
    layout = WorkerLayout(100, 100, (worker(101, private=300.0, gpu=2100.0), worker(102, private=300.0, gpu=2050.0)),
                          gpu_available=True)
    [finding] = s004.check(layout)
    assert finding.severity == Severity.HIGH
    assert finding.evidence["basis"] == "gpu"
    assert finding.evidence["per_worker_mb"] == [2100.0, 2050.0]


def test_s004_quiet_cases() -> None:
    single = WorkerLayout(100, None, (worker(100, private=900.0),), gpu_available=False)
    small = WorkerLayout(100, 100, (worker(101, private=60.0), worker(102, private=58.0)), gpu_available=False)
    uneven = WorkerLayout(100, 100, (worker(101, private=900.0), worker(102, private=120.0)), gpu_available=False)
    unknown = WorkerLayout(100, 100, (worker(101, private=None), worker(102, private=500.0)), gpu_available=False)
    shared = WorkerLayout(100, 100, (worker(101, private=80.0, gpu=20.0), worker(102, private=80.0, gpu=20.0)),
                          gpu_available=True)
    for layout in (single, small, uneven, unknown, shared):
        assert s004.check(layout) == [], layout


def test_s004_falls_back_to_host_when_gpu_holds_little() -> None:
    layout = WorkerLayout(100, 100, (worker(101, private=500.0, gpu=0.0), worker(102, private=480.0, gpu=0.0)),
                          gpu_available=True)
    [finding] = s004.check(layout)
    assert finding.evidence["basis"] == "host"


def test_s004_judges_host_memory_beyond_the_interpreters_own() -> None:
    """With a baseline (a bare process of the same interpreter importing torch), a worker's own memory is its
    anonymous memory less that: the CUDA build's 271 MB of torch is nobody's model copy."""
    def anon(pid: int, mb: float) -> WorkerProcess:
        return replace(worker(pid, private=mb + 1.0), anon_mb=mb, torch_loaded=True)

    cuda_tiny = WorkerLayout(100, 100, (anon(101, 288.7), anon(102, 288.9)), gpu_available=False,
                             baseline_anon_mb=271.2, baseline="python -I -c 'import torch'")
    assert s004.check(cuda_tiny) == []
    assert s004.check(replace(cuda_tiny, baseline_anon_mb=None)) != []  # without a baseline: USS over 256 MB
    copies = replace(cuda_tiny, workers=(anon(101, 371.0), anon(102, 369.5)))
    [finding] = s004.check(copies)
    assert finding.evidence["per_worker_mb"] == [pytest.approx(99.8), pytest.approx(98.3)]
    assert finding.evidence["baseline_anon_mb"] == 271.2 and "beyond a bare process with torch" in finding.title
