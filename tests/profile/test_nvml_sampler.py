"""GPU columns of the profiler's system sampler, through the project's NVML query helper on recorded values."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from infradoctor.node.gpu.nvml import NvmlQuery, ReplayNvml
from infradoctor.profile.launcher import _SystemSampler, gpu_sample

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"


def replay(name: str) -> ReplayNvml:
    return ReplayNvml.from_file(FIXTURES / f"{name}.nvml.json")


def test_gpu_sample_reads_every_recorded_device() -> None:
    util, mem = gpu_sample(NvmlQuery(replay("healthy_8x_h100")), list(range(8)))
    assert util == (97.0,) * 8
    assert mem == (75_932_631_040,) * 8


def test_gpu_sample_skips_a_lost_gpu_instead_of_failing() -> None:
    pytest.importorskip("pynvml")  # recorded NVMLErrors are raised as pynvml's own
    query = NvmlQuery(replay("xid79_ecc_8x_h100"))
    util, mem = gpu_sample(query, list(range(8)))
    assert len(util) == len(mem) == 7  # GPU 2 is lost: its reads are "not available"
    assert 0.0 in util and "nvmlDeviceGetUtilizationRates" in query.failures


def test_sampler_thread_records_gpu_columns_from_replay() -> None:
    sampler = _SystemSampler(os.getpid(), 0.05, nvml=replay("healthy_8x_h100"))
    sampler.start()
    try:
        deadline = time.monotonic() + 10
        while len(sampler.samples) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        sampler.stop_event.set()
        sampler.join(timeout=5)
    assert len(sampler.samples) >= 2
    assert all(s.gpu_util_percent == (97.0,) * 8 for s in sampler.samples)
    assert all(s.rss_bytes and s.rss_bytes > 0 for s in sampler.samples)
