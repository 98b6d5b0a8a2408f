"""Scan speed on real repositories (the scan corpus), on one CPU core, against peers measured in the same run.

The corpus is tests/corpus/scan/repos.json: public repositories at pinned commits, extracted from the bare mirrors
(the session's ``fetch`` tool brings them to /work/.mirror) by scripts/corpus_scan.py's extractor. For each
repository, in turn:

1. bare ``ast.parse`` + ``ast.walk`` over its Python files (the floor any AST linter in Python pays);
2. ``infradoctor scan`` (all default rules) in this process: CPU seconds and lines scanned;
3. ruff (``ruff check --select ALL``, one thread: ``RAYON_NUM_THREADS=1``) and, when installed, TorchFix
   (``torchfix -j 1 --select ALL``), each as a child process pinned to the same core.

Prints lines per CPU-second for each and the ratios. Goal: infradoctor >= 20k lines/s. Without the mirrors it falls
back to the installed torch package (``--root``).

    python benchmarks/run.py scan
    python benchmarks/bench_scan.py --only pytorch/examples --skip-peer
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

from infradoctor.scan.engine import ScanOptions, scan_paths  # noqa: E402

GOAL_LINES_PER_S = 20_000


def corpus_tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("corpus_scan", ROOT / "scripts" / "corpus_scan.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pin_one_core() -> int | None:
    """Pin this process (and its children) to one CPU; returns it, or None where not supported."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpu = sorted(os.sched_getaffinity(0))[-1]
    os.sched_setaffinity(0, {cpu})
    return cpu


def py_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if p.is_file())


def bare_ast(files: list[Path]) -> float:
    start = time.process_time()
    for p in files:
        try:
            for _ in ast.walk(ast.parse(p.read_bytes())):
                pass
        except (SyntaxError, ValueError):
            pass
    return time.process_time() - start


def ours(root: Path) -> tuple[float, int, int]:
    """CPU seconds, lines scanned, findings."""
    cpu0 = time.process_time()
    report = scan_paths([root], ScanOptions(use_config=False))
    return time.process_time() - cpu0, report.lines_scanned, len(report.violations)


def child_cpu(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> float | None:
    """CPU seconds of a child process (None when it timed out or is not installed)."""
    if shutil.which(argv[0]) is None and not Path(argv[0]).exists():
        return None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        subprocess.run(argv, capture_output=True, timeout=timeout, check=False, env=env)
    except subprocess.TimeoutExpired:
        return None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def peer_commands(root: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    bin_dir = Path(sys.executable).parent
    ruff = shutil.which("ruff") or str(bin_dir / "ruff")
    torchfix = shutil.which("torchfix") or str(bin_dir / "torchfix")
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    return {
        "ruff": ([ruff, "check", "--no-cache", "--select", "ALL", "--exit-zero", "--quiet", "--isolated",
                  str(root)], env),
        "torchfix": ([torchfix, "-j", "1", "--select", "ALL", str(root)], env),
    }


def targets(args: argparse.Namespace) -> list[tuple[str, Path]]:
    if args.root:
        return [(args.root.name, args.root)]
    tool = corpus_tool()
    repos = json.loads((ROOT / "tests" / "corpus" / "scan" / "repos.json").read_text())
    found = []
    for entry in repos:
        if args.only and entry["repo"] not in args.only:
            continue
        git_dir = Path(args.mirror_root) / entry["repo"].replace("/", "+") / "repo"
        if not git_dir.is_dir():
            continue
        into = Path(args.cache) / tool.slug(entry["repo"])
        tool.extract(git_dir, entry["commit"], into)
        found.append((entry["repo"], into))
    if not found:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            raise SystemExit("no corpus mirrors and no torch to fall back on")
        print("no corpus mirrors found: scanning the installed torch package instead")
        torch_root = Path(next(iter(spec.submodule_search_locations)))
        found = [("torch", torch_root)]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, help="scan this folder instead of the corpus")
    parser.add_argument("--only", action="append", default=[], metavar="REPO", help="only this corpus repository")
    parser.add_argument("--mirror-root", default="/work/.mirror")
    parser.add_argument("--cache", default="/tmp/corpus-scan")
    parser.add_argument("--peer-timeout", type=float, default=600.0, help="time bound per peer run, seconds")
    parser.add_argument("--skip-peer", action="store_true", help="do not run ruff or TorchFix")
    args = parser.parse_args(argv)
    cpu = pin_one_core()
    print(f"pinned to CPU {cpu}; python {sys.version.split()[0]}")
    totals = {"lines": 0, "bare": 0.0, "ours": 0.0, "findings": 0}
    peer_totals: dict[str, list[float]] = {}  # name -> [cpu seconds, lines of the repositories it finished]
    print(f"{'repository':48} {'lines':>8} {'bare ast':>10} {'scan':>10} {'ruff':>10} {'torchfix':>10}  lines/CPU-s")
    for name, root in targets(args):
        files = py_files(root)
        bare = bare_ast(files)
        cpu_s, lines, findings = ours(root)
        totals["lines"] += lines
        totals["bare"] += bare
        totals["ours"] += cpu_s
        totals["findings"] += findings
        row = [f"{lines / bare:10.0f}" if bare else f"{'-':>10}", f"{lines / cpu_s:10.0f}" if cpu_s else f"{'-':>10}"]
        if not args.skip_peer:
            for peer, (cmd, env) in peer_commands(root).items():
                peer_cpu = child_cpu(cmd, args.peer_timeout, env)
                if peer_cpu is None:
                    row.append(f"{'-':>10}")
                    continue
                total = peer_totals.setdefault(peer, [0.0, 0.0])
                total[0] += peer_cpu
                total[1] += lines
                row.append(f"{lines / peer_cpu:10.0f}" if peer_cpu else f"{'-':>10}")
        print(f"{name:48} {lines:8}", *row)
    lines = totals["lines"]
    rate = lines / totals["ours"] if totals["ours"] else 0.0
    print(f"{'total':48} {lines:8} {lines / totals['bare']:10.0f} {rate:10.0f}  ({totals['findings']} findings, "
          f"{totals['ours']:.1f} CPU-s)")
    print(f"ratio infradoctor/bare-ast {rate / (lines / totals['bare']):.2f}")
    for peer, (peer_cpu, peer_lines) in sorted(peer_totals.items()):
        if peer_cpu:
            print(f"ratio infradoctor/{peer} {rate / (peer_lines / peer_cpu):.3f} ({peer}: {peer_lines / peer_cpu:.0f} "
                  f"lines/CPU-s on the repositories it finished)")
    for peer in ("ruff", "torchfix"):
        if peer not in peer_totals and not args.skip_peer:
            print(f"{peer}: not installed or timed out (pip install 'infradoctor[bench]')")
    met = rate >= GOAL_LINES_PER_S
    print(f"goal >= {GOAL_LINES_PER_S} lines/CPU-s: {'met' if met else 'MISSED'}")
    with contextlib.suppress(OSError):
        sys.stdout.flush()
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
