"""logs: MB/s of `infradoctor logs` on generated access logs, bare and in envelopes, vs `grep -c` on the same file.

Generates (in a temp dir, deleted afterwards) --size-mb of each of: nginx in the `upstream_time` style (a preset),
nginx with a custom `log_format` (key=value fields the tool derives: `rt= urt= ua= us= cache=`), and Envoy's default
format; each bare, inside `kubectl logs --prefix` and inside CRI/containerd records (`<time> stdout F `); plus a
--big-mb nginx file for the flat-memory check. Each run is a fresh `python -m infradoctor logs` process; its CPU time
and peak RSS come from wait4. Reported per file:

- in-process MB/s and MB per CPU-second (from the result's metrics.parse: after imports, all threads' CPU time: the
  "per core" figure),
- end-to-end MB/s (wall time of the whole process, imports included) and its CPU MB/s,
- `grep -c` (LC_ALL=C) on the same file, and the ratios,
- the engine that read it and the lines parsed (every generated line is an access line).

The goal: >= 100 MB per CPU-second for access logs bare and with envelopes, on the fast engine (polars), and peak
RSS < 300 MB whatever the size. The last lines are a table of every file (MB per CPU-second in-process and end to
end, the share of grep -c's MB per CPU-second) and the verdict against that goal. CPU time on a machine shared
with other work is inflated by the contention, so the load average is printed before and after: compare runs made
under similar load, and interleave runs of the two trees when comparing code (medians of several).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOAL_MB_PER_CPU_S = 100.0
GOAL_RSS_MB = 300.0
UPSTREAMS = [f"10.1.0.{i}:8000" for i in range(11, 19)]


def nginx_block(rng: random.Random, lines: int) -> bytes:
    """One minute of nginx upstream_time-style lines; the minute prefix is replaced per block."""
    out = []
    for i in range(lines):
        sec = i * 60 // lines
        t = rng.expovariate(1 / 0.25)
        status, us = 200, "200"
        upstream = rng.choice(UPSTREAMS)
        urt = f"{t:.3f}"
        r = rng.random()
        if r < 0.01:
            status, us, urt = 504, "504", "1.000"
        elif r < 0.02:
            status, us, urt = 502, "502", "0.000"
        elif r < 0.03:
            second = rng.choice(UPSTREAMS)
            us, urt, upstream = f"502, {status}", f"0.001, {t:.3f}", f"{upstream}, {second}"
        rt = f"{float(urt.split(', ')[-1]) + rng.random() * 0.004:.3f}"
        out.append(
            f'10.0.{i % 200}.{i % 250} - - [29/Nov/2026:10:00:{sec:02d} +0000] "POST /v1/chat/completions HTTP/1.1" '
            f'{status} {rng.randint(200, 9000)} "-" "python-httpx/0.27.0" rt={rt} uct="0.000" uht="{urt}" '
            f'urt="{urt}" ua="{upstream}" us="{us}"\n'
        )
    return "".join(out).encode()


def envoy_block(rng: random.Random, lines: int) -> bytes:
    """One minute of Envoy default-format lines."""
    out = []
    for i in range(lines):
        sec = i * 60 // lines
        dur = int(rng.expovariate(1 / 250)) + 1
        code, flags, ust = 200, "-", str(max(0, dur - rng.randint(0, 3)))
        host = rng.choice(UPSTREAMS)
        r = rng.random()
        if r < 0.01:
            code, flags, ust, dur = 504, "UT", "-", 15000 + rng.randint(0, 2)
        elif r < 0.02:
            code, flags, ust, dur = 503, "UF", "-", rng.randint(0, 3)
        elif r < 0.025:
            code, flags, ust, host, dur = 503, "UH", "-", "-", 0
        out.append(
            f'[2026-11-29T10:00:{sec:02d}.{rng.randint(0, 999):03d}Z] "POST /v1/chat/completions HTTP/1.1" {code} '
            f'{flags} {rng.randint(100, 4000)} {rng.randint(100, 9000)} {dur} {ust} "10.0.{i % 200}.{i % 250}" '
            f'"python-httpx/0.27.0" "{rng.getrandbits(128):032x}" "llm.example.com" "{host}"\n'
        )
    return "".join(out).encode()


def custom_block(rng: random.Random, lines: int) -> bytes:
    """nginx with a custom log_format: combined, then key=value fields in an order of its own."""
    out = []
    for i in range(lines):
        sec = i * 60 // lines
        t = rng.expovariate(1 / 0.25)
        upstream, status, us, urt = rng.choice(UPSTREAMS), 200, "200", f"{t:.3f}"
        r = rng.random()
        if r < 0.01:
            status, us, urt = 504, "504", "1.000"
        elif r < 0.02:
            status, us, urt = 502, "502", "0.000"
        rt = f"{float(urt) + rng.random() * 0.004:.3f}"
        out.append(
            f'10.0.{i % 200}.{i % 250} - - [29/Nov/2026:10:00:{sec:02d} +0000] "POST /v1/chat/completions HTTP/1.1" '
            f'{status} {rng.randint(200, 9000)} "-" "python-httpx/0.27.0" ua={upstream} us={us} rt={rt} urt={urt} '
            f"cache={rng.choice(['MISS', 'HIT', '-'])}\n"
        )
    return "".join(out).encode()


ENVELOPES: dict[str, Callable[[bytes, int], bytes]] = {
    "bare": lambda line, i: line,
    "kubectl": lambda line, i: b"[pod/llm-router-7cc46d9596-v8q%02d/nginx] " % (i % 16) + line,
    "cri": lambda line, i: b"2026-11-29T10:00:00.%09dZ stdout F " % i + line,
}
"""Envelopes the benchmark wraps lines in."""


def wrap(block: bytes, envelope: str) -> bytes:
    """Every line of ``block`` inside the envelope."""
    if envelope == "bare":
        return block
    add = ENVELOPES[envelope]
    return b"".join(add(line, i) for i, line in enumerate(block.splitlines(keepends=True)))


def generate(path: Path, kind: str, size_mb: float, seed: int = 1, envelope: str = "bare") -> None:
    """Write about ``size_mb`` MB: per-minute blocks whose minute advances."""
    rng = random.Random(seed)
    make = {"nginx": nginx_block, "nginx-custom": custom_block, "envoy": envoy_block}[kind]
    block = wrap(make(rng, 20_000), envelope)
    marker = b"29/Nov/2026:10:00:" if kind.startswith("nginx") else b"2026-11-29T10:00:"
    target = int(size_mb * 1e6)
    written = minute = 0
    with path.open("wb") as fh:
        while written < target:
            hour, mm = divmod(minute, 60)
            new = (f"29/Nov/2026:{10 + hour % 14:02d}:{mm:02d}:" if kind.startswith("nginx")
                   else f"2026-11-29T{10 + hour % 14:02d}:{mm:02d}:").encode()
            chunk = block.replace(marker, new)
            fh.write(chunk)
            written += len(chunk)
            minute += 1


def run_measured(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, bytes]:
    """(wall s, cpu s, peak RSS MB, stdout) of a child process, from wait4."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{argv[:3]} exited {proc.returncode}: {err.decode(errors='replace')[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def grep_count(path: Path) -> tuple[float, float]:
    """(wall s, cpu s) of `grep -c HTTP` in the C locale."""
    grep = shutil.which("grep") or "grep"
    wall, cpu, _, out = run_measured([grep, "-c", "HTTP", str(path)], env={**os.environ, "LC_ALL": "C"})
    assert int(out.strip() or 0) > 0
    return wall, cpu


PYCACHE = Path(tempfile.gettempdir()) / "bench_logs_pycache"
"""Compiled modules for the child processes, as an installed package has them (an environment with
PYTHONDONTWRITEBYTECODE would otherwise charge every run ~1 s of compiling to the parse)."""


def child_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONPYCACHEPREFIX": str(PYCACHE)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def warm_up(work: Path) -> None:
    """One small run so every module the command imports is compiled once (not part of any measurement)."""
    sample = work / "warm.log"
    generate(sample, "nginx", 0.5)
    subprocess.run([sys.executable, "-m", "infradoctor", "logs", str(sample), "--engine", "polars", "--json",
                    str(work / "warm.json"), "--no-store", "-q"], env=child_env(), capture_output=True, check=False)
    sample.unlink()


def infradoctor(path: Path, out: Path, engine: str) -> dict[str, Any]:
    env = child_env()
    wall, cpu, rss, _ = run_measured([sys.executable, "-m", "infradoctor", "logs", str(path), "--engine", engine,
                                      "--json", str(out), "--no-store", "-q"], env=env)
    data = json.loads(out.read_text())
    parse = data["metrics"]["parse"]
    row = data["metrics"]["files"][0]
    return {"wall_s": wall, "cpu_s": cpu, "rss_mb": rss, "in_mb_s": parse["mb_per_s"],
            "in_mb_cpu_s": parse["mb_per_cpu_s"], "requests": data["metrics"]["headline"].get("requests", 0),
            "findings": len(data["findings"]), "engine": row.get("engine") or "-", "lines": row["lines"],
            "structured": sum(n for f, n in row.get("formats", {}).items() if f != "text")}


def load_average() -> str:
    """The 1, 5 and 15 minute load averages and the number of CPUs, as text."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def measure(path: Path, label: str, work: Path, engine: str = "polars") -> tuple[dict[str, Any], float]:
    mb = path.stat().st_size / 1e6
    # warm the page cache for both so neither pays for the disk
    grep_count(path)
    g_wall, g_cpu = grep_count(path)
    r = infradoctor(path, work / f"{label.replace('/', '_')}.json", engine)
    print(f"{label:22} {mb:7.0f} MB | infradoctor[{engine}] in-process {r['in_mb_s']:6.1f} MB/s, "
          f"{r['in_mb_cpu_s']:6.1f} MB/cpu-s | end-to-end {mb / r['wall_s']:6.1f} MB/s, {mb / r['cpu_s']:6.1f} "
          f"MB/cpu-s, peak RSS {r['rss_mb']:5.0f} MB | grep -c {mb / g_wall:6.0f} MB/s, {mb / max(g_cpu, 1e-3):6.0f} "
          f"MB/cpu-s", flush=True)
    ratio = (mb / r["wall_s"]) / (mb / g_wall)
    r["grep_mb_cpu_s"] = mb / max(g_cpu, 1e-3)
    r["e2e_mb_cpu_s"] = mb / r["cpu_s"]
    print(f"ratio {label}: infradoctor/grep wall = {ratio:.3f}; per CPU-second = "
          f"{r['e2e_mb_cpu_s'] / r['grep_mb_cpu_s']:.3f}; engine {r['engine']}; lines {r['lines']:.0f}, "
          f"access lines read {r['structured']:.0f}; requests {r['requests']:.0f}, findings {r['findings']:.0f}",
          flush=True)
    return r, mb


def summary(rows: list[tuple[str, dict[str, Any]]]) -> bool:
    """The table of every file measured on the fast engine and the verdict against the goal; True when met."""
    print(f"\n{'file':22} {'MB/cpu-s':>9} {'e2e':>7} {'grep -c':>8} {'vs grep':>8}  goal {GOAL_MB_PER_CPU_S:.0f}")
    for label, r in rows:
        mark = "met" if r["in_mb_cpu_s"] >= GOAL_MB_PER_CPU_S else "NOT met"
        print(f"{label:22} {r['in_mb_cpu_s']:9.1f} {r['e2e_mb_cpu_s']:7.1f} {r['grep_mb_cpu_s']:8.0f} "
              f"{r['in_mb_cpu_s'] / r['grep_mb_cpu_s']:8.3f}  {mark}")
    if not rows:
        return True
    lowest = min(rows, key=lambda row: row[1]["in_mb_cpu_s"])
    met = sum(1 for _, r in rows if r["in_mb_cpu_s"] >= GOAL_MB_PER_CPU_S)
    verdict = "met" if met == len(rows) else "NOT met"
    print(f"verdict: >= {GOAL_MB_PER_CPU_S:.0f} MB per CPU-second in-process (MB/cpu-s above, polars import and "
          f"rules included) {verdict}: {met} of {len(rows)} files; lowest {lowest[1]['in_mb_cpu_s']:.1f} "
          f"({lowest[0]})", flush=True)
    return met == len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=400, help="size of each generated file (default 400)")
    parser.add_argument("--big-mb", type=float, default=1000, help="size of the RSS check file (0: skip)")
    parser.add_argument("--python-mb", type=float, default=40, help="size for the pure-Python engine run (0: skip)")
    parser.add_argument("--dir", type=Path, default=None, help="where to generate (default: a temp dir)")
    parser.add_argument("--kinds", nargs="+", default=["nginx", "nginx-custom", "envoy"],
                        choices=["nginx", "nginx-custom", "envoy"], help="formats to generate")
    parser.add_argument("--envelopes", nargs="+", default=list(ENVELOPES), choices=list(ENVELOPES),
                        help="envelopes to wrap them in")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench_logs_", dir=args.dir))
    ok = True
    rows: list[tuple[str, dict[str, Any]]] = []
    warm_up(work)
    print(f"before: {load_average()}", flush=True)
    try:
        for kind in args.kinds:
            for envelope in args.envelopes:
                label = f"{kind}/{envelope}"
                path = work / f"{kind}_{envelope}.log"
                generate(path, kind, args.size_mb, envelope=envelope)
                result, _ = measure(path, label, work)
                rows.append((label, result))
                meets = (result["in_mb_cpu_s"] >= GOAL_MB_PER_CPU_S and result["rss_mb"] < GOAL_RSS_MB
                         and result["engine"] == "polars" and result["structured"] == result["lines"])
                print(f"goal {label}: >= {GOAL_MB_PER_CPU_S:.0f} MB/cpu-s in-process on the fast engine, every line "
                      f"read, RSS < {GOAL_RSS_MB:.0f} MB: {'met' if meets else 'NOT met'}", flush=True)
                ok &= meets
                if args.python_mb:
                    small = work / f"{kind}_{envelope}_small.log"
                    with path.open("rb") as src, small.open("wb") as dst:
                        dst.write(src.read(int(args.python_mb * 1e6)))
                    measure(small, f"{label} (python engine)", work, engine="python")
                    small.unlink()
                path.unlink()
        if args.big_mb:
            big = work / "nginx_big.log"
            generate(big, "nginx", args.big_mb, seed=2)
            result, _ = measure(big, "nginx big (RSS check)", work)
            flat = result["rss_mb"] < GOAL_RSS_MB
            print(f"goal peak RSS < {GOAL_RSS_MB:.0f} MB at {args.big_mb:.0f} MB: {'met' if flat else 'NOT met'}")
            ok &= flat
            big.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary(rows)
    print(f"after: {load_average()}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
