"""The watch loop with an injected clock, its summary and record file, and --watch through the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from infradoctor.node.gpu.nvml import NvmlBackend, ReplayNvml
from infradoctor.node.metrics import evidence_from_metrics
from infradoctor.node.watch import (
    MAX_DISTRIBUTION_VALUES,
    NodeSampler,
    WatchSample,
    distributions,
    gpu_values,
    gpu_windows,
    read_record,
    summarize,
    watch,
    write_record_line,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
SRC = Path(__file__).resolve().parents[2] / "src"


class FakeClock:
    def __init__(self, sample_cost: float = 0.0) -> None:
        self.now = 100.0
        self.sample_cost = sample_cost
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


def test_samples_on_schedule_until_duration() -> None:
    fake = FakeClock()
    values = iter(range(100))

    def sample() -> dict[str, float | None]:
        fake.now += 0.25  # each sample takes a quarter second; ticks must not drift
        return {"x": float(next(values))}

    samples = list(watch(sample, interval_s=1.0, duration_s=3.0, clock=fake.clock, sleep=fake.sleep))
    assert [s.index for s in samples] == [0, 1, 2, 3]
    assert fake.sleeps == [0.75, 0.75, 0.75]
    assert [s.t_s for s in samples] == [0.25, 1.25, 2.25, 3.25]


def test_bounded_without_duration_and_interval_floor() -> None:
    fake = FakeClock()
    samples = list(watch(lambda: {}, interval_s=0.0, duration_s=None, clock=fake.clock, sleep=fake.sleep,
                         max_samples=5))
    assert len(samples) == 5 and fake.sleeps == [0.1] * 4


def test_summary_and_distributions() -> None:
    samples = [WatchSample(i, float(i), {"cpu_util_pct": float(i), "gpu0_util_pct": None if i % 2 else 50.0})
               for i in range(1, 101)]
    summary = summarize(samples, interval_s=1.0, interrupted=True)
    cpu = summary.metrics["cpu_util_pct"]
    assert (cpu.count, cpu.min, cpu.mean, cpu.p95, cpu.max) == (100, 1.0, 50.5, 95.0, 100.0)
    assert summary.metrics["gpu0_util_pct"].count == 50 and summary.interrupted and summary.elapsed_s == 99.0
    many = [WatchSample(i, float(i), {"v": float(i)}) for i in range(12_001)]
    dist = distributions(many)["v"]
    assert len(dist) <= MAX_DISTRIBUTION_VALUES and dist[0] == 0.0 and dist == sorted(dist)
    assert distributions(many) == distributions(many)  # deterministic


def test_record_lines_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    with path.open("w") as handle:
        for i in range(3):
            write_record_line(handle, WatchSample(i, i * 1.0, {"a": 1.5, "b": None}, "2026-11-29T10:00:00Z"))
    lines = path.read_text().splitlines() + ["{broken"]
    assert [s.values for s in read_record(lines)] == [{"a": 1.5, "b": None}] * 3


def test_sampler_reads_host_and_gpus() -> None:
    record = json.loads((FIXTURES / "healthy_8x_h100.nvml.json").read_text())
    sampler = NodeSampler(NvmlBackend(ReplayNvml(record)))
    assert sampler()["cpu_util_pct"] is None  # the first CPU reading spans an unknown time
    values = sampler()
    assert 0.0 <= values["cpu_util_pct"] <= 100.0 and values["mem_used_pct"] > 0
    assert values["gpu7_util_pct"] == 97.0 and values["gpu0_throttle"] == 0.0
    assert values["gpu0_mem_used_pct"] == pytest.approx(100 * 72415 / 81559, abs=0.01)
    assert NodeSampler(None)().keys() == {"cpu_util_pct", "load_1m", "mem_used_pct", "swap_used_pct"}


def test_cli_watch_with_duration_and_record(cli, tmp_path: Path, result_validator) -> None:
    record, out = tmp_path / "samples.jsonl", tmp_path / "out.json"
    res = cli("node", "--watch", "--interval", "0.2", "--duration", "0.6", "--record", str(record),
              "--nvml-record", str(FIXTURES / "healthy_8x_h100.nvml.json"), "--json", str(out))
    assert res.exit_code == 0, res.stderr
    data = json.loads(out.read_text())
    result_validator(data)
    lines = record.read_text().splitlines()
    assert len(lines) == 4 == data["metrics"]["watch"]["samples"]
    assert data["metrics"]["watch"]["metrics"]["gpu3_util_pct"]["mean"] == 97.0
    assert len(data["metrics"]["distributions"]["cpu_util_pct"]) == 3  # the first CPU reading is not a sample
    assert len(data["metrics"]["distributions"]["gpu0_util_pct"]) == 4
    assert "Watch" in res.stdout
    rebuilt = evidence_from_metrics(data["metrics"])
    assert rebuilt.watch is not None and rebuilt.watch.metrics["gpu3_util_pct"].mean == 97.0


@pytest.mark.integration
def test_ctrl_c_ends_watch_cleanly(tmp_path: Path) -> None:
    record, out = tmp_path / "samples.jsonl", tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(SRC), "INFRADOCTOR_HOME": str(tmp_path / "store")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "infradoctor", "node", "--watch", "--interval", "0.2", "--gpu-backend", "none",
         "--record", str(record), "--json", str(out), "-q"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not record.exists() or len(record.read_text().splitlines()) < 3):
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    data = json.loads(out.read_text())
    samples = len(record.read_text().splitlines())
    assert samples >= 3 and data["metrics"]["watch"]["samples"] == samples
    assert data["metrics"]["watch"]["interrupted"] is True
    assert b"Traceback" not in err


def test_live_view_shows_host_history_and_one_row_per_gpu() -> None:
    import io

    from rich.console import Console

    from infradoctor.cli.node import live_table, sparkline

    assert sparkline([0.0, 50.0, 100.0, None, 250.0]) == "▁▅█ █"
    samples = [WatchSample(i, float(i), {"cpu_util_pct": 10.0 * i, "load_1m": 1.0, "mem_used_pct": 5.0,
                                         "swap_used_pct": 0.0, "gpu0_util_pct": 90.0, "gpu0_throttle": 1.0,
                                         "gpu1_util_pct": None})
               for i in range(15)]
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(live_table(samples, 1.0))
    text = out.getvalue()
    assert "sample 15" in text and text.count("\n") < 40
    rows = [line for line in text.splitlines() if line.strip().startswith(("0 ", "1 "))]
    assert any("yes" in r for r in rows)  # GPU 0 throttled


class GrowingNvml(ReplayNvml):
    """A recorded node whose GPU 1 replays PCIe packets and is held by the power cap while it works."""

    def __init__(self, record: dict) -> None:
        super().__init__(record)
        self.reads: dict[int, int] = {}

    def nvmlDeviceGetPcieReplayCounter(self, handle: int) -> int:  # noqa: N802 - pynvml's name
        self.reads[handle] = self.reads.get(handle, 0) + 1  # read once per sample and GPU
        return 7 + (self.reads[handle] * 20 if handle == 1 else 0)

    def nvmlDeviceGetViolationStatus(self, handle: int, policy: int) -> SimpleNamespace:  # noqa: N802
        held = self.reads.get(handle, 0) * 0.6e9 if handle == 1 and policy == 0 else 0.0  # 0.6 s per 1 s sample
        return SimpleNamespace(referenceTime=0, violationTime=int(held))


def test_watch_turns_counter_growth_into_each_gpus_window(result_validator) -> None:
    from infradoctor.node import NodeRequest, run

    record = json.loads((FIXTURES / "healthy_8x_h100.nvml.json").read_text())
    fake = FakeClock()
    lib = GrowingNvml(record)
    result = run(NodeRequest(host=False, watch=True, interval_s=1.0, duration_s=60.0, gpu_backend="nvml"),
                 backend=NvmlBackend(lib, process_name=lib.process_name), sleep=fake.sleep, clock=fake.clock)
    result_validator(result)
    windows = {d["index"]: d["window"] for d in result.metrics["gpu"]["devices"]}
    assert windows[0]["pcie_replays"] == 0 and windows[0]["seconds"] == 60.0 and windows[0]["samples"] == 61
    assert windows[1]["pcie_replays"] == 60 * 20
    assert windows[1]["clock_event_share"]["sw_power_cap"] == pytest.approx(0.6, abs=0.05)
    found = {(f.code, f.evidence["gpu"]) for f in result.findings}
    assert ("N010", 1) in found and ("N003", 1) in found and not any(gpu == 0 for _, gpu in found)
    n010 = next(f for f in result.findings if f.code == "N010")
    assert n010.severity.value == "medium" and n010.evidence["replays_per_min"] >= 8


def test_windows_need_two_samples_and_ignore_counter_resets() -> None:
    from .builders import gpu

    first = WatchSample(0, 0.0, gpu_values(gpu(0, pcie_replay_count=50, clock_event_time_s={"sw_power_cap": 10.0})))
    reset = WatchSample(1, 30.0, gpu_values(gpu(0, pcie_replay_count=3, clock_event_time_s={"sw_power_cap": 40.0})))
    assert gpu_windows([first]) == {}
    window = gpu_windows([first, reset])[0]
    assert window.pcie_replays is None  # the counter went back: a driver reload, not a rate
    assert window.clock_event_share == {"sw_power_cap": 1.0} and window.seconds == 30.0
    summary = summarize([first, reset], interval_s=30.0, interrupted=False)
    assert not any("_counter_" in name for name in summary.metrics)  # counters are judged by growth only


def test_record_lines_from_elsewhere_are_bounded() -> None:
    lines = ['{"index": 0, "t_s": 1, "values": {"a": "12", "b": 1e999, "c": ' + "9" * 400 + "}}",
             '{"index": -1, "t_s": 1, "values": {}}', '{"index": 0, "t_s": "x", "values": {}}',
             '{"index": 0, "t_s": 1, "values": []}', "[" * 5000, '{"index": 1, "t_s": 2, "values": {"a": 3}}']
    samples = read_record(lines)
    assert [(s.index, s.values) for s in samples] == [(0, {"a": None, "b": None, "c": None}), (1, {"a": 3.0})]
