"""Long fuzz run of scan's launcher readers: cases, crashes, slowest case, peak memory (issue 17's proof).

Each case is a random sequence of the tokens the readers look for (Dockerfile instructions, Procfile entries,
shell separators and quotes, YAML keys, block scalars, server names, worker options) with random junk between
them, read as a Dockerfile, Procfile, shell script, Compose file and Kubernetes manifest; gunicorn configuration
files go through the whole Python check (C013). Seeded, so a crash reproduces. The goal: 0 crashes, and time per
input linear (at most 50 ms per 100 KB).

    python benchmarks/run.py scan_fuzz
    python benchmarks/bench_scan_fuzz.py --cases 100000 --seed 17
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
import traceback
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent))

from tests.scan.test_launcher_fuzz import ADVERSARIAL, KINDS, TOKENS  # noqa: E402

from infradoctor.scan import launchers  # noqa: E402
from infradoctor.scan.engine import scan_source  # noqa: E402

GOAL_MS_PER_100KB = 50.0
JUNK = "abcxyz019 -_./:=$\"'\\#\n\t[]{}|&;<>"
CONF_LINES = ["workers = 4", "workers = multiprocessing.cpu_count() * 2 + 1", "wsgi_app = 'app.main:app'",
              "bind = '0.0.0.0:8000'", "import multiprocessing", "if True:\n    workers = 8", "workers = (", "# c"]


def case(rng: random.Random, size: int) -> str:
    parts = []
    for _ in range(size):
        if rng.random() < 0.8:
            parts.append(rng.choice(TOKENS))
        else:
            parts.append("".join(rng.choice(JUNK) for _ in range(rng.randint(1, 12))))
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=100_000, help="cases per reader (default 100000)")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--max-tokens", type=int, default=400, help="largest case, in tokens")
    args = parser.parse_args(argv)
    failed = False
    for file_kind in (*KINDS, "gunicorn-conf"):
        rng = random.Random(f"{args.seed}:{file_kind}")
        crashes = 0
        slowest = (0.0, 0)
        first_crash = ""
        start = time.perf_counter()
        for n in range(args.cases):
            if file_kind == "gunicorn-conf":
                text = "\n".join(rng.choice(CONF_LINES) for _ in range(rng.randint(0, 12)))
            else:
                text = case(rng, rng.randint(0, args.max_tokens))
            t0 = time.perf_counter()
            try:
                if file_kind == "gunicorn-conf":
                    with contextlib.suppress(SyntaxError, ValueError):  # not Python: a parse error for the engine
                        scan_source(text, "gunicorn.conf.py", select={"C013"})
                else:
                    launchers.launches(text, file_kind)
            except Exception:  # noqa: BLE001 - counting crashes is the point
                crashes += 1
                if not first_crash:
                    first_crash = f"case {n}: {traceback.format_exc(limit=3)}"
            elapsed = time.perf_counter() - t0
            if elapsed > slowest[0]:
                slowest = (elapsed, len(text))
        total = time.perf_counter() - start
        print(f"{file_kind:14} {args.cases} cases in {total:6.1f} s, {crashes} crashes, slowest "
              f"{1000 * slowest[0]:.1f} ms ({slowest[1]} chars)")
        if first_crash:
            print(first_crash)
        failed |= crashes > 0
    print("adversarial inputs (ms per 100 KB at 400 KB; goal <= "
          f"{GOAL_MS_PER_100KB:.0f}):")
    for name, make in sorted(ADVERSARIAL.items()):
        text = make(4000)
        for file_kind in ("dockerfile", "shell", "compose", "manifest"):
            t0 = time.perf_counter()
            launchers.launches(text, file_kind)
            per_100kb = 1000 * (time.perf_counter() - t0) / (len(text) / 100_000)
            flag = "" if per_100kb <= GOAL_MS_PER_100KB else "  OVER"
            print(f"  {name:28} {file_kind:10} {len(text):8} chars {per_100kb:8.1f} ms/100KB{flag}")
    tracemalloc.start()  # memory apart from timing: tracing slows Python several times over
    worst = 0.0
    for make in ADVERSARIAL.values():
        text = make(4000)
        for file_kind in KINDS:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            launchers.launches(text, file_kind)
            worst = max(worst, (tracemalloc.get_traced_memory()[1] - base) / max(1, len(text)))
    tracemalloc.stop()
    print(f"peak memory while reading an adversarial input: {worst:.1f} bytes per input character")
    print(f"goal 0 crashes: {'met' if not failed else 'MISSED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
