"""CUDA stage timing and NVML worker memory on a real GPU (``pytest -m gpu``)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from infradoctor.procs import stop_process, wait_until
from infradoctor.serve import ACCESS_LOGGER, TimingMiddleware, request_timing, stage, worker_layout
from infradoctor.serve.rules import s004_model_copy_per_worker as s004
from infradoctor.serve.workers import nvml_gpu_memory_by_pid
from tests.serve.asgi import call, response_headers

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - the gpu marker is deselected by default
    pytest.skip("needs a CUDA device", allow_module_level=True)

SLEEP_CYCLES = 200_000_000


def gpu_sleep_ms() -> float:
    """Duration of ``torch.cuda._sleep(SLEEP_CYCLES)`` on this device, measured with events."""
    torch.cuda._sleep(1000)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(SLEEP_CYCLES)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def test_cuda_stage_does_not_wait_for_the_device() -> None:
    expected = gpu_sleep_ms()
    assert expected > 20.0
    with request_timing() as timing:
        host_start = time.perf_counter()
        with stage("inference", cuda=True):
            torch.cuda._sleep(SLEEP_CYCLES)
        host_ms = (time.perf_counter() - host_start) * 1000
        assert timing.durations == {}
        assert len(timing.pending) == 1
    assert host_ms < expected / 4  # the kernel was only launched: no sync on the request path
    timing.resolve_all()
    assert timing.pending == []
    assert 0.8 * expected <= timing.durations["inference"] <= 1.25 * expected + 2.0


def test_sync_stage_measures_wall_time_of_gpu_work() -> None:
    expected = gpu_sleep_ms()
    with request_timing() as timing:
        torch.cuda._sleep(SLEEP_CYCLES)  # queued work before the stage is not counted
        with stage("inference", sync=True):
            torch.cuda._sleep(SLEEP_CYCLES)
    assert timing.pending == []
    assert 0.8 * expected <= timing.durations["inference"] <= 1.5 * expected + 5.0


def test_middleware_resolves_cuda_stages_after_the_response(caplog: pytest.LogCaptureFixture) -> None:
    expected = gpu_sleep_ms()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        with stage("preprocess"):
            pass
        with stage("inference", cuda=True):
            torch.cuda._sleep(SLEEP_CYCLES)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    with caplog.at_level(logging.INFO, logger=ACCESS_LOGGER):
        messages = asyncio.run(call(TimingMiddleware(app), "/predict"))
        header = response_headers(messages)["server-timing"]
        assert "inference" not in header  # still running on the device when the head was sent
        assert wait_until(lambda: any(r.name == ACCESS_LOGGER for r in caplog.records), timeout=30)
    line = json.loads(next(r for r in caplog.records if r.name == ACCESS_LOGGER).getMessage())
    assert 0.8 * expected <= line["stages"]["inference"] <= 1.25 * expected + 2.0


def test_nvml_sees_this_process() -> None:
    block = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    used = nvml_gpu_memory_by_pid()
    assert used is not None and sum(used.values()) > 0
    if os.getpid() not in used:
        pytest.skip("NVML reports pids of another pid namespace (container)")
    assert used[os.getpid()] >= 256 * 1024 * 1024
    del block


HOLDER = """
import multiprocessing as mp, sys, time
from pathlib import Path

def hold(ready):
    import torch
    block = torch.empty(1024 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    Path(ready).touch()
    time.sleep(60)

if __name__ == "__main__":
    mp.set_start_method("spawn")
    out = Path(sys.argv[1])
    procs = [mp.Process(target=hold, args=(str(out / f"ready{i}"),)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
"""


def test_workers_each_holding_gpu_memory_is_s004(tmp_path: Path) -> None:
    script = tmp_path / "holder.py"
    script.write_text(textwrap.dedent(HOLDER))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], start_new_session=True)
    try:
        assert wait_until(lambda: len(list(tmp_path.glob("ready*"))) == 2, timeout=120,
                          alive=lambda: proc.poll() is None)
        layout = worker_layout(proc.pid)
    finally:
        stop_process(proc, grace_s=5.0, group=True)
    assert layout.gpu_available and len(layout.workers) == 2
    if not any(w.gpu_memory_mb for w in layout.workers):
        pytest.skip("NVML reports pids of another pid namespace (container)")
    [finding] = s004.check(layout)
    assert finding.evidence["basis"] == "gpu"
    assert all(mb >= 1024 for mb in finding.evidence["per_worker_mb"])
