"""Scan speed: lines per CPU-second of `infradoctor scan` over site-packages/torch, on one core, vs TorchFix.

Runs, each pinned to one CPU core:
1. bare `ast.parse` + `ast.walk` over the files (the floor any AST linter pays);
2. infradoctor's scan (all rules) over the whole torch package (goal: >= 20k lines/s);
3. infradoctor and TorchFix (`torchfix -j 1 --select ALL`) over the same subset (torch/nn by default), TorchFix
   time-bounded by --peer-timeout; prints the ratio.

TorchFix is in the `bench` extra (`pip install 'infradoctor[bench]'`); without it the peer side is skipped.

    python benchmarks/run.py scan
    python benchmarks/bench_scan.py --subset nn --peer-timeout 300
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from infradoctor.scan.engine import ScanOptions, scan_paths  # noqa: E402

GOAL_LINES_PER_S = 20_000


def torch_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("torch is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def pin_one_core() -> int | None:
    """Pin this process (and its children) to one CPU; returns it, or None where not supported."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = sorted(os.sched_getaffinity(0))[-1]
    os.sched_setaffinity(0, {cpu})
    return cpu


def py_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if p.is_file())


def count_lines(files: list[Path]) -> int:
    total = 0
    for p in files:
        with contextlib.suppress(OSError):
            total += len(p.read_bytes().splitlines())
    return total


def bare_ast(files: list[Path]) -> float:
    start = time.process_time()
    for p in files:
        try:
            for _ in ast.walk(ast.parse(p.read_bytes())):
                pass
        except (SyntaxError, ValueError):
            pass
    return time.process_time() - start


def infradoctor_scan(root: Path) -> tuple[float, float, int, int]:
    """CPU seconds, wall seconds, lines scanned, findings."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    report = scan_paths([root], ScanOptions(use_config=False))
    return time.process_time() - cpu0, time.perf_counter() - wall0, report.lines_scanned, len(report.violations)


def torchfix_scan(root: Path, timeout: float) -> tuple[float | None, float, str]:
    """CPU seconds of `torchfix -j 1 --select ALL root` (None when it timed out), wall seconds, last output line."""
    exe = shutil.which("torchfix") or str(Path(sys.executable).with_name("torchfix"))
    if not Path(exe).exists():
        return None, 0.0, "torchfix not installed (pip install 'infradoctor[bench]')"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall0 = time.perf_counter()
    try:
        done = subprocess.run([exe, "-j", "1", "--select", "ALL", str(root)], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - wall0, f"timed out after {timeout:.0f} s"
    wall = time.perf_counter() - wall0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tail = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or [""])[-1]
    return cpu, wall, tail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, help="package to scan (default: the installed torch)")
    parser.add_argument("--subset", default="nn", help="sub-package for the side-by-side run (default: nn)")
    parser.add_argument("--peer-timeout", type=float, default=600.0, help="time bound for TorchFix, seconds")
    parser.add_argument("--skip-peer", action="store_true", help="do not run TorchFix")
    parser.add_argument("--subset-only", action="store_true", help="skip the whole-package run (quick check)")
    args = parser.parse_args(argv)
    root = args.root or torch_dir()
    cpu = pin_one_core()
    print(f"pinned to CPU {cpu}; python {sys.version.split()[0]}; root {root}")
    failed = False
    if not args.subset_only:
        files = py_files(root)
        lines = count_lines(files)
        bare = bare_ast(files)
        ours_cpu, ours_wall, scanned, findings = infradoctor_scan(root)
        print(f"whole package: {len(files)} files, {lines} lines")
        print(f"  bare ast.parse+walk   {lines / bare:10.0f} lines/CPU-s ({bare:.1f} s)")
        print(f"  infradoctor scan      {scanned / ours_cpu:10.0f} lines/CPU-s ({ours_cpu:.1f} s CPU, "
              f"{ours_wall:.1f} s wall, {findings} findings)")
        print(f"ratio infradoctor/bare-ast {scanned / ours_cpu / (lines / bare):.2f}")
        print(f"goal >= {GOAL_LINES_PER_S} lines/s: {'met' if scanned / ours_cpu >= GOAL_LINES_PER_S else 'MISSED'}")
        failed = scanned / ours_cpu < GOAL_LINES_PER_S
    subset = root / args.subset
    sub_files = py_files(subset)
    sub_lines = count_lines(sub_files)
    ours_cpu, ours_wall, scanned, findings = infradoctor_scan(subset)
    print(f"subset {subset.name}: {len(sub_files)} files, {sub_lines} lines")
    print(f"  infradoctor scan      {scanned / ours_cpu:10.0f} lines/CPU-s ({ours_cpu:.2f} s CPU, {findings} findings)")
    if args.skip_peer:
        return 1 if failed else 0
    peer_cpu, peer_wall, tail = torchfix_scan(subset, args.peer_timeout)
    if peer_cpu is None:
        print(f"  torchfix -j 1         {tail}")
        if "timed out" in tail:
            bound = sub_lines / peer_wall
            print(f"  torchfix              < {bound:.0f} lines/s (did not finish in {peer_wall:.0f} s)")
            print(f"ratio infradoctor/torchfix > {scanned / ours_cpu / bound:.1f}")
        return 1 if failed else 0
    print(f"  torchfix -j 1         {sub_lines / peer_cpu:10.0f} lines/CPU-s ({peer_cpu:.1f} s CPU, "
          f"{peer_wall:.1f} s wall; last line: {tail[:80]!r})")
    print(f"ratio infradoctor/torchfix {scanned / ours_cpu / (sub_lines / peer_cpu):.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
