"""Worker layout from real process trees; GPU memory per process from NVML (recorded values here)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from infradoctor.node.gpu.nvml import RECORD_FORMAT, ReplayNvml
from infradoctor.procs import stop_process, wait_until
from infradoctor.serve.workers import WorkerLayout, nvml_gpu_memory_by_pid, worker_layout

pytestmark = pytest.mark.integration

SUPERVISOR = """
import multiprocessing as mp, sys, time
from pathlib import Path

def work(ready, mb):
    hold = bytearray(mb * 1024 * 1024)
    for i in range(0, len(hold), 4096):
        hold[i] = 1
    Path(ready).touch()
    time.sleep(60)

if __name__ == "__main__":
    mp.set_start_method("spawn")
    out, n, mb = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    procs = [mp.Process(target=work, args=(str(out / f"ready{i}"), mb)) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
"""


@contextmanager
def started(argv: list[str], tmp_path: Path, ready: int) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        assert wait_until(lambda: len(list(tmp_path.glob("ready*"))) >= ready, timeout=60,
                          alive=lambda: proc.poll() is None)
        yield proc
    finally:
        stop_process(proc, grace_s=3.0, group=True)


def test_supervisor_with_workers(tmp_path: Path) -> None:
    script = tmp_path / "sup.py"
    script.write_text(textwrap.dedent(SUPERVISOR))
    with started([sys.executable, str(script), str(tmp_path), "2", "64"], tmp_path, 2) as proc:
        layout = worker_layout(proc.pid, gpu_memory_by_pid=None)
    assert layout.root_pid == proc.pid and layout.supervisor_pid == proc.pid
    assert len(layout.workers) == 2  # the resource tracker is not a worker
    for w in layout.workers:
        assert "multiprocessing" in w.command
        assert w.private_mb is not None and w.private_mb >= 60
        assert w.rss_mb is not None and w.rss_mb >= w.private_mb
        assert w.gpu_memory_mb is None
    assert layout.gpu_available is False
    assert WorkerLayout.from_dict(layout.to_dict()) == layout


def test_wrapper_process_is_descended(tmp_path: Path) -> None:
    script = tmp_path / "sup.py"
    script.write_text(textwrap.dedent(SUPERVISOR))
    argv = ["/bin/sh", "-c", f"'{sys.executable}' '{script}' '{tmp_path}' 1 8; true"]
    with started(argv, tmp_path, 1) as proc:
        layout = worker_layout(proc.pid, gpu_memory_by_pid={})
    assert layout.supervisor_pid is None
    [only] = layout.workers
    assert only.pid != proc.pid and "multiprocessing" in only.command
    assert only.gpu_memory_mb == 0.0 and layout.gpu_available


def test_single_process(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        layout = worker_layout(proc.pid, gpu_memory_by_pid={proc.pid: 3 * 1024 * 1024 * 1024})
    finally:
        stop_process(proc, grace_s=2.0)
    [only] = layout.workers
    assert only.pid == proc.pid and layout.supervisor_pid is None
    assert only.gpu_memory_mb == 3072.0


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"


def replay(name: str) -> ReplayNvml:
    return ReplayNvml.from_file(FIXTURES / f"{name}.nvml.json")


def test_nvml_recorded_values_per_process() -> None:
    # recorded on 8 H100s, one training process per GPU holding 75.9 GB
    used = nvml_gpu_memory_by_pid(replay("healthy_8x_h100"))
    assert used == {41210 + i: 75_921_096_704 for i in range(8)}


def test_nvml_lost_gpu_and_idle_gpu_are_left_out() -> None:
    # GPU 2 is lost (its handle raises NVML_ERROR_GPU_IS_LOST), GPU 5 runs nothing
    used = nvml_gpu_memory_by_pid(replay("xid79_ecc_8x_h100"))
    assert used is not None and sorted(used) == [41210, 41211, 41213, 41214, 41216, 41217]


def test_nvml_memory_not_reported_and_graphics_processes() -> None:
    record = {"format": RECORD_FORMAT, "system": {"nvmlInit": None}, "devices": [
        {"nvmlDeviceGetComputeRunningProcesses": [{"pid": 4101, "usedGpuMemory": 2_254_438_400},
                                                  {"pid": 4104, "usedGpuMemory": None}],
         "nvmlDeviceGetGraphicsRunningProcesses": [{"pid": 4101, "usedGpuMemory": 1_048_576}]},
        {"nvmlDeviceGetComputeRunningProcesses": {"nvml_error": "NVML_ERROR_NOT_SUPPORTED"}},
    ]}
    assert nvml_gpu_memory_by_pid(ReplayNvml(record)) == {4101: 2_254_438_400 + 1_048_576}


def test_nvml_not_available_is_a_value() -> None:
    pytest.importorskip("pynvml")
    failed = {"format": RECORD_FORMAT, "devices": [],
              "system": {"nvmlInit": {"nvml_error": "NVML_ERROR_LIBRARY_NOT_FOUND"}}}
    assert nvml_gpu_memory_by_pid(ReplayNvml(failed)) is None


def test_real_nvml_without_gpu_is_none() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except Exception:
        assert nvml_gpu_memory_by_pid() is None
    else:
        pynvml.nvmlShutdown()
        pytest.skip("a GPU driver is present; covered by the gpu tests")
