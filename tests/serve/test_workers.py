"""Worker layout from real process trees; GPU memory per process from NVML (recorded values here)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from infradoctor.procs import stop_process, wait_until
from infradoctor.serve.workers import WorkerLayout, nvml_gpu_memory_by_pid, worker_layout

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


class RecordedNvml:
    """Replays NVML answers recorded on a host with two GPUs and three serving processes.

    Values as nvidia-ml-py returned them: ``usedGpuMemory`` in bytes, None where the driver reports N/A.
    """

    RECORDED: dict[int, dict[str, list[dict[str, Any]]]] = {
        0: {"compute": [{"pid": 4101, "usedGpuMemory": 2_254_438_400}, {"pid": 4102, "usedGpuMemory": 2_254_438_400}],
            "graphics": []},
        1: {"compute": [{"pid": 4103, "usedGpuMemory": 2_252_341_248}, {"pid": 4104, "usedGpuMemory": None}],
            "graphics": [{"pid": 4101, "usedGpuMemory": 1_048_576}]},
    }

    def __init__(self, *, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.shutdown = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.RECORDED)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(**p) for p in self.RECORDED[handle]["compute"]]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(**p) for p in self.RECORDED[handle]["graphics"]]


def test_nvml_recorded_values() -> None:
    nvml = RecordedNvml()
    assert nvml_gpu_memory_by_pid(nvml) == {4101: 2_254_438_400 + 1_048_576, 4102: 2_254_438_400,
                                            4103: 2_252_341_248}
    assert nvml.shutdown


def test_nvml_not_available_is_a_value() -> None:
    assert nvml_gpu_memory_by_pid(RecordedNvml(fail_init=True)) is None


def test_real_nvml_without_gpu_is_none() -> None:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except Exception:
        assert nvml_gpu_memory_by_pid() is None
    else:
        pynvml.nvmlShutdown()
        pytest.skip("a GPU driver is present; covered by the gpu tests")
