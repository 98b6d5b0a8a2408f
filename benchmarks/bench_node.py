"""infradoctor node: snapshot wall time (goal < 2 s) and --watch at 1 Hz CPU cost (goal < 2% of one core).

Snapshot peer: `nvidia-smi -q -x` where present, else a psutil-only snapshot of the same host facts (CPU over the
same 0.5 s window, memory, disks, TCP sockets, processes). Watch peer: `nvidia-smi -l 1` where present, else
`vmstat 1`. Both sides run as fresh processes in the same run; the ratio is printed.

    python benchmarks/run.py node [--runs 5] [--watch-seconds 20]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT_GOAL_S = 2.0
WATCH_GOAL_PCT = 2.0
WARMUP_S = 3.0

PSUTIL_SNAPSHOT = """
import os, time, psutil
procs = list(psutil.process_iter())
for p in procs:
    try: p.cpu_percent(None)
    except psutil.Error: pass
psutil.cpu_times(percpu=True); time.sleep(0.5); psutil.cpu_times(percpu=True)
psutil.virtual_memory(); psutil.swap_memory(); os.getloadavg()
[psutil.disk_usage(p.mountpoint) for p in psutil.disk_partitions()]
len(psutil.net_connections("tcp"))
sorted((p.info["memory_info"].rss, p.pid) for p in psutil.process_iter(["memory_info"]) if p.info["memory_info"])
"""


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), "INFRADOCTOR_HOME": tempfile.mkdtemp(prefix="idr-bench-")}


def wall(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=120)
        times.append(time.perf_counter() - start)
    return times


def steady_cpu_pct(argv: list[str], seconds: float) -> float:
    """CPU use of a long-running process (children included) over ``seconds`` after a warm-up, % of one core."""
    proc = subprocess.Popen(argv, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        handle = psutil.Process(proc.pid)
        time.sleep(WARMUP_S)

        def cpu() -> float:
            total = sum(handle.cpu_times()[:2])
            for child in handle.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += sum(child.cpu_times()[:2])
            return total

        before, start = cpu(), time.perf_counter()
        time.sleep(seconds)
        used, elapsed = cpu() - before, time.perf_counter() - start
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return 100.0 * used / elapsed


def in_process_sample_ms(samples: int = 200) -> float:
    """CPU per sample of the watch sampler with this machine's GPU backend, measured in this process."""
    sys.path.insert(0, str(ROOT / "src"))
    from infradoctor.node.gpu import select_backend
    from infradoctor.node.watch import NodeSampler

    backend, _ = select_backend("auto")
    sampler = NodeSampler(backend)
    sampler()
    start = time.process_time()
    for _ in range(samples):
        sampler()
    used = time.process_time() - start
    backend.close()
    return 1000.0 * used / samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="snapshot runs per side (median reported)")
    parser.add_argument("--watch-seconds", type=float, default=20.0, help="measured seconds of --watch")
    args = parser.parse_args(argv)

    ours = [sys.executable, "-m", "infradoctor", "node", "--no-store", "-q"]
    smi = shutil.which("nvidia-smi")
    peer_name, peer = ("nvidia-smi -q -x", [smi, "-q", "-x"]) if smi else (
        "psutil-only snapshot", [sys.executable, "-c", PSUTIL_SNAPSHOT])
    ours_s = statistics.median(wall(ours, args.runs))
    peer_s = statistics.median(wall(peer, args.runs))
    print(f"snapshot: infradoctor node {ours_s:.2f} s (median of {args.runs}); {peer_name} {peer_s:.2f} s")
    print(f"ratio snapshot infradoctor/peer = {ours_s / peer_s:.2f}")
    snapshot_ok = ours_s < SNAPSHOT_GOAL_S
    print(f"goal snapshot < {SNAPSHOT_GOAL_S} s: {'PASS' if snapshot_ok else 'FAIL'}")

    duration = WARMUP_S + args.watch_seconds + 30
    watch = [*ours, "--watch", "--interval", "1", "--duration", str(duration)]
    watch_peer_name, watch_peer = ("nvidia-smi -l 1", [smi, "-l", "1"]) if smi else ("vmstat 1", ["vmstat", "1"])
    ours_pct = steady_cpu_pct(watch, args.watch_seconds)
    peer_pct = steady_cpu_pct(watch_peer, args.watch_seconds) if shutil.which(watch_peer[0]) else float("nan")
    print(f"watch 1 Hz over {args.watch_seconds:.0f} s: infradoctor {ours_pct:.3f}% of a core; "
          f"{watch_peer_name} {peer_pct:.3f}% (process CPU times, 10 ms resolution)")
    per_sample_ms = in_process_sample_ms()
    print(f"one watch sample in-process: {per_sample_ms:.3f} ms CPU = {per_sample_ms / 10:.3f}% of a core at 1 Hz")
    if peer_pct > 0:
        print(f"ratio watch cpu infradoctor/peer = {ours_pct / peer_pct:.2f}")
    watch_ok = max(ours_pct, per_sample_ms / 10) < WATCH_GOAL_PCT
    print(f"goal watch < {WATCH_GOAL_PCT}% of a core: {'PASS' if watch_ok else 'FAIL'}")
    return 0 if snapshot_ok and watch_ok else 1


if __name__ == "__main__":
    sys.exit(main())
