"""CLI start-up: `infradoctor --version` and `infradoctor scan --help` against a bare `python -c pass`.

Goals (issue 14): --version under 0.15 s and scan --help under 0.25 s above bare Python start-up, measured here as
the median of interleaved rounds (each command once per round, so background load hits all three alike). Also
prints how many infradoctor modules each one imports.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

GOALS_S = {"--version": 0.15, "scan --help": 0.25}


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=60)
    return time.perf_counter() - start


def _modules(args: list[str]) -> int:
    code = ("import sys, io, contextlib\nfrom infradoctor.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()): main({args!r})\n"
            "print(sum(1 for m in sys.modules if m.startswith('infradoctor')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return int(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "--version": [sys.executable, "-m", "infradoctor", "--version"],
        "scan --help": [sys.executable, "-m", "infradoctor", "scan", "--help"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(2):  # warm the page cache
        for argv in commands.values():
            _time(argv)
    for _ in range(args.rounds):
        for name, argv in commands.items():
            times[name].append(_time(argv))
    base = statistics.median(times["python -c pass"])
    print(f"python -c pass: {base * 1000:.0f} ms (median of {args.rounds})")
    failed = 0
    for name, goal in GOALS_S.items():
        median = statistics.median(times[name])
        above = median - base
        modules = _modules(name.split())
        ok = above <= goal
        failed += not ok
        print(f"{name}: {median * 1000:.0f} ms, {above * 1000:.0f} ms above bare python (goal < {goal * 1000:.0f} ms)"
              f" {'ok' if ok else 'MISSED'}; {modules} infradoctor modules imported")
        print(f"ratio {name} / python -c pass: {median / base:.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
