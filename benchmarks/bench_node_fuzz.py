"""infradoctor node: the long fuzz run, 100,000 mutated cases per parser (smi XML, smi text, NVML records).

Goals (issue 17): 0 crashes, 0 hangs, time linear in the input (<= 50 ms per 100 KB of report), peak memory <=
3x the input + 100 MB. Each case is a real input (the GPU corpus, the recorded NVML fixtures) mutated by
tests/support/gpu_fuzz.py with a seeded generator, then evaluated end to end: parse, every node rule, the result's
JSON. Printed per parser: cases, crashes (by exception, and hangs past ``--case-timeout``, with the seed that
reproduces the first), the slowest case,
the worst (with its seed, and re-timed 3 times so that a pause of a shared machine is told from a slow input) and
99th-percentile time per 100 KB (inputs under 100 KB count as 100 KB) of the parse alone and with the
rules and the result's JSON, and the peak traced memory over the input on every 100th case (tracing slows a case
tenfold, so those cases are not timed). The peer is the baseline's crash count when ``--pythonpath`` points at an older checkout.

    python benchmarks/run.py node_fuzz [--cases 100000] [--seed 1] [--only xml|text|nvml] [--pythonpath DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import signal
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TIME_GOAL_MS_PER_100KB = 50.0
MEMORY_GOAL_RATIO = 3.0
MEMORY_ALLOWANCE = 100 * 1024 * 1024


def evaluate(kind: str, data: Any) -> float:
    """One case end to end, with the API of this checkout or of an older one (parse_smi_xml); the parse's seconds."""
    from infradoctor.node.evidence import GpuExpectation, KernelLogEvidence, NodeEvidence
    from infradoctor.node.gpu import smi_xml
    from infradoctor.node.gpu.nvml import NvmlBackend, RecordFormatError, ReplayNvml

    start = time.perf_counter()
    if kind == "nvml":
        try:
            replay = ReplayNvml(data)
        except RecordFormatError:
            return time.perf_counter() - start
        backend = NvmlBackend(replay, source="fuzz", process_name=replay.process_name)
        backend.sample()
        probe = backend.probe()
    else:
        parse = getattr(smi_xml, "parse_smi_report", None) or smi_xml.parse_smi_xml
        probe = parse(data, source="fuzz")
    parsed = time.perf_counter() - start
    evidence = NodeEvidence(host=None, gpu=probe.snapshot, kernel=KernelLogEvidence("fuzz", 0, ()),
                            expectation=GpuExpectation(None, (), False, None), notes=probe.notes)
    from infradoctor.node.snapshot import NodeRequest, build_result

    result = build_result(NodeRequest(host=False), evidence, started_at="2026-01-01T00:00:00Z", duration_s=0.0)
    result.to_json()  # the rules ran inside build_result
    return parsed


class CaseTimeout(Exception):
    """A case ran past ``--case-timeout``: a hang."""


def _alarm(signum: int, frame: object) -> None:
    raise CaseTimeout


def size_of(data: Any) -> int:
    return len(data) if isinstance(data, bytes) else len(repr(data))


def run(kind: str, cases: int, seed: int, case_timeout: float) -> dict[str, Any]:
    from tests.support import gpu_fuzz

    inputs: list[Any] = gpu_fuzz.nvml_records() if kind == "nvml" else gpu_fuzz.corpus_documents(kind)
    mutate = {"xml": gpu_fuzz.mutate_xml, "text": gpu_fuzz.mutate_text, "nvml": gpu_fuzz.mutate_record}[kind]
    crashes: Counter[str] = Counter()
    first_crash: dict[str, int] = {}
    slowest = (0.0, 0, -1)
    worst = (0.0, -1)  # the case with the most ms per 100 KB, and its seed
    parse_per_100kb: list[float] = []
    per_100kb: list[float] = []
    worst_memory = 0.0
    peak_mb = 0.0
    evaluate(kind, inputs[0])  # imports and caches before the first timed case
    for case in range(cases):
        case_seed = seed * 1_000_003 + case
        rng = random.Random(case_seed)
        data = mutate(rng, inputs[rng.randrange(len(inputs))])
        size = size_of(data)
        traced = case % 100 == 0
        if traced:
            tracemalloc.start()
        start = time.perf_counter()
        parse_s = 0.0
        signal.setitimer(signal.ITIMER_REAL, case_timeout)
        try:
            parse_s = evaluate(kind, data)
        except CaseTimeout:
            crashes["hang"] += 1
            first_crash.setdefault(f"hang: more than {case_timeout:g} s", case_seed)
        except Exception as exc:  # noqa: BLE001 - counting crashes is the point
            crashes[type(exc).__name__] += 1
            first_crash.setdefault(f"{type(exc).__name__}: {str(exc)[:80]}", case_seed)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        seconds = time.perf_counter() - start
        if traced:  # memory only: tracing slows the case tenfold, so its time is not counted
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            worst_memory = max(worst_memory, (peak - MEMORY_ALLOWANCE) / max(1, size))
            peak_mb = max(peak_mb, peak / 2**20)
            continue
        if seconds > slowest[0]:
            slowest = (seconds, size, case_seed)
        per_100kb.append(1000.0 * seconds * 100_000 / max(size, 100_000))
        if per_100kb[-1] > worst[0]:
            worst = (per_100kb[-1], case_seed)
        parse_per_100kb.append(1000.0 * parse_s * 100_000 / max(size, 100_000))
    per_100kb.sort()
    parse_per_100kb.sort()
    retimed = None
    if worst[1] >= 0:  # the worst case again, 3 times: a slow input stays slow, a pause of the machine does not
        rng = random.Random(worst[1])
        data = mutate(rng, inputs[rng.randrange(len(inputs))])
        times = []
        for _ in range(3):
            start = time.perf_counter()
            with contextlib.suppress(Exception):  # crashes were counted above
                evaluate(kind, data)
            times.append(time.perf_counter() - start)
        retimed = 1000.0 * min(times) * 100_000 / max(size_of(data), 100_000)
    return {
        "cases": cases, "crashes": sum(crashes.values()), "by_type": dict(crashes), "first": first_crash,
        "slowest_s": slowest[0], "slowest_bytes": slowest[1], "slowest_seed": slowest[2],
        "p99_ms_per_100kb": per_100kb[int(0.99 * (len(per_100kb) - 1))] if per_100kb else 0.0,
        "max_ms_per_100kb": per_100kb[-1] if per_100kb else 0.0,
        "parse_p99_ms_per_100kb": parse_per_100kb[int(0.99 * (len(parse_per_100kb) - 1))] if parse_per_100kb else 0.0,
        "parse_max_ms_per_100kb": parse_per_100kb[-1] if parse_per_100kb else 0.0,
        "worst_seed": worst[1], "worst_retimed_ms_per_100kb": retimed,
        "memory_over_input": worst_memory,
        "peak_mb": peak_mb,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000, help="cases per parser (default 100000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=("xml", "text", "nvml"), action="append")
    parser.add_argument("--pythonpath", default=str(ROOT / "src"), help="the infradoctor to fuzz (default: this one)")
    parser.add_argument("--case-timeout", type=float, default=10.0, help="seconds after which a case is a hang")
    args = parser.parse_args(argv)
    sys.path[:0] = [args.pythonpath, str(ROOT)]
    signal.signal(signal.SIGALRM, _alarm)
    failed = False
    for kind in args.only or ("xml", "text", "nvml"):
        started = time.perf_counter()
        report = run(kind, args.cases, args.seed, args.case_timeout)
        print(f"{kind:5} cases {report['cases']}  crashes {report['crashes']} {report['by_type'] or ''}  "
              f"slowest {report['slowest_s'] * 1000:.0f} ms ({report['slowest_bytes']} bytes, seed "
              f"{report['slowest_seed']})  ms/100KB (parse: p99 {report['parse_p99_ms_per_100kb']:.1f}, max "
              f"{report['parse_max_ms_per_100kb']:.1f}; with rules and result: p99 {report['p99_ms_per_100kb']:.1f}, "
              f"max {report['max_ms_per_100kb']:.1f}, re-timed {report['worst_retimed_ms_per_100kb'] or 0:.1f} (seed "
              f"{report['worst_seed']}); goal {TIME_GOAL_MS_PER_100KB:g})  peak memory over input "
              f"{max(0.0, report['memory_over_input']):.2f}x + 100 MB (goal {MEMORY_GOAL_RATIO:g}x; largest peak "
              f"{report['peak_mb']:.0f} MB)  "
              f"[{time.perf_counter() - started:.0f} s]", flush=True)
        for name, seed in list(report["first"].items())[:5]:
            print(f"      first {name} (seed {seed})")
        failed |= report["crashes"] > 0 or report["memory_over_input"] > MEMORY_GOAL_RATIO
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
