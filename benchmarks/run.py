"""Benchmark runner: `python benchmarks/run.py [NAME...]` runs benchmarks and prints their ratios.

Each benchmark is a module `benchmarks/bench_<name>.py` with a `main(argv) -> int` that measures infradoctor and a
peer in the same run and prints `ratio` lines. Speed and memory goals live here, never in timed unit tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def available() -> dict[str, Path]:
    return {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list benchmarks")
    args, rest = parser.parse_known_args(argv)
    benches = available()
    if args.list:
        for name, path in benches.items():
            spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
            assert spec and spec.loader
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            doc = (module.__doc__ or "").strip().splitlines()
            print(f"{name:16} {doc[0] if doc else ''}")
        return 0
    names = args.names or list(benches)
    failed = 0
    for name in names:
        if name not in benches:
            print(f"unknown benchmark {name!r}; try --list", file=sys.stderr)
            return 2
        spec = importlib.util.spec_from_file_location(f"bench_{name}", benches[name])
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        code = module.main(rest)
        print(f"== {name}: exit {code} in {time.perf_counter() - start:.1f} s", flush=True)
        failed += code != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
