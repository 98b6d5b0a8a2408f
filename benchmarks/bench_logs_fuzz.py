"""logs fuzz: every entry point that reads untrusted text, 100k seeded cases each; crashes, slowest case, memory.

The targets are tests/logs/fuzz_targets.py's (envelopes, the line router in every --format, the kernel reader, Xid
lines, PCI addresses, signatures, app prefixes, HAProxy/Envoy/key=value readers, nginx format derivation, format
strings, timestamps). Each case is a real line of the corpus or fixtures with random edits (inserted quotes,
brackets, NULs..., deleted or repeated slices, cuts), several lines joined, or random text from a hostile
alphabet. Reported per target: cases, crashes (the first one's input saved under --out), the slowest case (seconds,
characters, and ms per 100 KB), and on the 100 KB hostile inputs (``"1:" * 50000``, an Xid line with a 100k-character
address, 16,000-deep JSON, ...) the slowest time per 100 KB and the peak memory traced (tracemalloc) against the input
size. Goals (issue 17): 0 crashes, <= 50 ms per 100 KB, peak memory <= 3x input + 100 MB.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "logs"))
sys.path.insert(0, str(ROOT / "src"))

from fuzz_targets import TARGETS, hostile_inputs, mutate, seed_lines  # noqa: E402

GOAL_MS_PER_100KB = 50.0
GOAL_MEMORY = (3.0, 100 * 2**20)
ALPHABET = '"[]{}<>:/ =,\\-.|0123456789aAzZNVRMXid()%\x00\t\n\u2028\u00e9'


def case(rng: random.Random, seeds: list[str]) -> str:
    """One fuzz input."""
    kind = rng.random()
    if kind < 0.6:
        return mutate(rng.choice(seeds), rng)
    if kind < 0.85:
        return "\n".join(mutate(rng.choice(seeds), rng) for _ in range(rng.randint(2, 12)))
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 400)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=100_000, help="cases per target (default 100000)")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--only", action="append", help="run only these targets (repeatable)")
    parser.add_argument("--out", type=Path, default=Path("bench_logs_fuzz_crashes"), help="where crash inputs go")
    args = parser.parse_args(argv)
    seeds = seed_lines()
    hostile = hostile_inputs()
    targets = {k: v for k, v in TARGETS.items() if not args.only or k in args.only}
    ok = True
    print(f"{'target':22} {'cases':>7} {'crashes':>7} {'slowest s':>9} {'chars':>7} {'hostile ms/100KB':>16} "
          f"{'peak MB':>8} {'input MB':>8}", flush=True)
    for name, target in targets.items():
        rng = random.Random(f"{args.seed}:{name}")
        crashes = 0
        slowest = (0.0, 0)
        for index in range(args.cases):
            text = case(rng, seeds)
            start = time.perf_counter()
            try:
                target(text)
            except Exception as exc:  # noqa: BLE001 - a crash is what this counts
                crashes += 1
                if crashes == 1:
                    args.out.mkdir(parents=True, exist_ok=True)
                    (args.out / f"{name.replace(':', '_')}_{index}.txt").write_text(
                        f"{type(exc).__name__}: {exc}\n---\n{text}", encoding="utf-8", errors="replace")
            elapsed = time.perf_counter() - start
            if elapsed > slowest[0]:
                slowest = (elapsed, len(text))
        worst_rate, worst_peak, worst_size = 0.0, 0, 1
        for text in hostile.values():
            start = time.perf_counter()
            try:
                target(text)
            except Exception:  # noqa: BLE001
                crashes += 1
            elapsed = time.perf_counter() - start
            worst_rate = max(worst_rate, elapsed * 1000 * 100_000 / max(len(text), 1))
            tracemalloc.start()  # a second run for memory: tracing slows Python several times
            with contextlib.suppress(Exception):  # counted in the timed run
                target(text)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            if peak > worst_peak:
                worst_peak, worst_size = peak, len(text.encode("utf-8", "replace"))
        meets = (crashes == 0 and worst_rate <= GOAL_MS_PER_100KB
                 and worst_peak <= GOAL_MEMORY[0] * worst_size + GOAL_MEMORY[1])
        ok &= meets
        print(f"{name:22} {args.cases:7} {crashes:7} {slowest[0]:9.4f} {slowest[1]:7} {worst_rate:16.1f} "
              f"{worst_peak / 2**20:8.1f} {worst_size / 2**20:8.2f}{'' if meets else '  NOT met'}", flush=True)
    print(f"goal: 0 crashes, <= {GOAL_MS_PER_100KB:.0f} ms per 100 KB, peak <= 3x input + 100 MB: "
          f"{'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
