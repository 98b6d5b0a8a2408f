"""GPU paths on a real CUDA device (``pytest -m gpu``): CUDA-event timing, pageable vs pinned copies, idle gaps,
fp32 where bf16/TF32 is available, CUDA allocator memory."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from infradoctor.profile.launcher import ProfileOptions
from infradoctor.profile.result import profile_run

pytestmark = [pytest.mark.gpu, pytest.mark.integration, pytest.mark.timeout(180)]


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


requires_cuda = pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")

TRAIN = """
    import sys, time, torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    pinned = sys.argv[1] == "pinned"
    x = torch.randn(8192, 1024); y = torch.randint(0, 10, (8192,))
    loader = DataLoader(TensorDataset(x, y), batch_size=256, pin_memory=pinned)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(2):
        for xb, yb in loader:
            xb = xb.to("cuda", non_blocking=pinned); yb = yb.to("cuda", non_blocking=pinned)
            loss = loss_fn(model(xb), yb)
            opt.zero_grad(); loss.backward(); opt.step()
            if sys.argv[2] == "gaps":
                time.sleep(0.02)  # host-side work while the GPU idles
    torch.cuda.synchronize()
"""


def run(tmp_path: Path, *args: str):
    script = tmp_path / "train_cuda.py"
    script.write_text(textwrap.dedent(TRAIN), encoding="utf-8")
    return profile_run([sys.executable, str(script), *args], ProfileOptions(sample_interval_s=0.1), timeout_s=150)


@requires_cuda
def test_pageable_copies_and_fp32_are_found(tmp_path: Path, result_validator) -> None:
    import torch

    result = run(tmp_path, "pageable", "busy")
    result_validator(result)
    assert result.exit_status == 0 and not result.errors, result.errors
    metrics = result.metrics
    assert metrics["workload"]["cuda"] is True
    assert metrics["h2d"]["copies"] >= 60 and metrics["h2d"]["pageable_copies"] == metrics["h2d"]["copies"]
    assert metrics["memory"]["cuda_peak_mb"] > 10
    assert any(row[3] for row in metrics["memory"]["timeline"]["rows"])  # CUDA allocator readings per step
    codes = {f.code for f in result.findings}
    assert "P010" in codes
    p010 = next(f for f in result.findings if f.code == "P010")
    copy_line = textwrap.dedent(TRAIN).splitlines().index(
        next(line for line in textwrap.dedent(TRAIN).splitlines() if 'xb = xb.to("cuda"' in line)) + 1
    assert p010.location is not None and p010.location.line == copy_line
    if torch.cuda.get_device_capability() >= (8, 0):
        assert "P009" in codes
    assert metrics["steps"]["boundary"] == "optimizer"


@requires_cuda
def test_pinned_copies_are_not_flagged_and_cuda_events_resolve(tmp_path: Path) -> None:
    result = run(tmp_path, "pinned", "busy")
    assert result.exit_status == 0 and not result.errors
    assert result.metrics["h2d"]["pageable_copies"] == 0
    assert result.metrics["h2d"]["non_blocking_copies"] == result.metrics["h2d"]["copies"]
    assert "P010" not in {f.code for f in result.findings}


@requires_cuda
def test_idle_gaps_show_as_gpu_underutilized(tmp_path: Path) -> None:
    result = run(tmp_path, "pinned", "gaps")
    assert result.exit_status == 0
    assert "P014" in {f.code for f in result.findings}
    assert result.metrics["system"]["gpu_util_mean_pct"] is not None


@requires_cuda
def test_cuda_event_timing_is_recorded_per_step(tmp_path: Path) -> None:
    from infradoctor.profile.launcher import start_profiled

    script = tmp_path / "train_cuda.py"
    script.write_text(textwrap.dedent(TRAIN), encoding="utf-8")
    with start_profiled([sys.executable, str(script), "pinned", "busy"], ProfileOptions()) as proc:
        assert proc.wait(150) == 0
        evidence = proc.collect()
    busy = [s.gpu_busy_s for s in evidence.steps if s.gpu_busy_s is not None]
    assert len(busy) >= len(evidence.steps) // 2
    assert sum(busy) > 0
