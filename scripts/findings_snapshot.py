"""Findings over the repository's recorded inputs, normalised for diffing.

Runs ``logs``, ``node`` and ``scan`` (the commands whose input is a file, so whose findings are deterministic) over
every recorded input in tests/fixtures and tests/corpus, ``logs --router-stats-dump`` over the saved router
statistics in tests/corpus/metrics, and judges recorded evidence with the library: the stored ``load`` runs in
tests/fixtures/report (their metrics as ``LoadEvidence``), hand-built ``route`` evidence (the seeded scenarios of
tests/route/builders.py the rule tests use) and the profile corpus's evidence bundles (tests/corpus/profile/recorded,
judged as tests/profile/test_corpus.py does). It prints one JSON document: per input, the findings' code, name,
severity, title, evidence and location. Timestamps, ids and durations are left out. Use it to show that a refactor
changed no diagnosis:

    python scripts/findings_snapshot.py > before.json   # on the old commit
    python scripts/findings_snapshot.py > after.json    # on the new one
    diff before.json after.json

``--python`` and ``--pythonpath`` choose the interpreter and code to run (default: this interpreter, this checkout).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


ROUTER_DUMPS = (
    ("envoy-1.40.0-stats.json", "envoy-1.40.0-clusters.json"),
    ("envoy-1.40.0-stats.json",),
    ("envoy-1.40.0-stats-prometheus-cluster.prom",),
    ("envoy-stats-prometheus-old-ungrouped-datadog-fixture-head.prom",),
    ("haproxy-2.6.12-stats.csv", "haproxy-2.6.12-servers-state.txt"),
    ("haproxy-2.6.12-stats.csv",),
    ("haproxy-2.6.12-promex.prom",),
    ("haproxy-stats-csv-datadog-mock.csv",),
    ("nginx-1.22.1-stub-status.txt",),
    ("nginx-stub-status-docs-example.txt",),
    ("nginx-prometheus-exporter-0.11.0-metrics.prom",),
)
"""Saved router statistics judged by ``logs --router-stats-dump`` (a host-only dump after the one it names)."""

ROUTE_SCENARIOS = (
    "healthy", "router-overhead", "router-overhead-one-backend", "router-overhead-p99", "slow-backends",
    "failing-backend", "down-backend", "slow-backend", "uneven", "retries-upstream-list", "retries-attempt-header",
    "retries-counters", "all-down", "connects-flaky", "connects-slow", "router-timeout", "client-timeout",
    "health-mismatch", "cold-backend", "mixed", "overhead-with-envoy-retries", "overhead-with-haproxy-queue",
)
"""Hand-built ``route`` evidence: the seeded scenarios of tests/route/test_rules.py (see :func:`route_evidence`)."""


def inputs() -> list[tuple[str, list[str]]]:
    """(name, command arguments) for every recorded input; ``--judge KIND ARG`` runs in this script."""
    runs: list[tuple[str, list[str]]] = []
    for folder in (ROOT / "tests" / "fixtures" / "logs", ROOT / "tests" / "corpus" / "logs"):
        for path in sorted(folder.glob("*")):
            if path.suffix in (".log", ".jsonl", ".gz", ".txt") and path.is_file():
                runs.append((f"logs:{path.relative_to(ROOT)}", ["logs", str(path)]))
    for folder in (ROOT / "tests" / "fixtures" / "node", ROOT / "tests" / "corpus" / "gpu"):
        for path in sorted(folder.glob("*.xml")):
            runs.append((f"node:{path.relative_to(ROOT)}", ["node", "--no-host", "--smi-xml", str(path)]))
        for path in sorted(folder.glob("*.nvml.json")):
            runs.append((f"node:{path.relative_to(ROOT)}", ["node", "--no-host", "--nvml-record", str(path)]))
    kern = ROOT / "tests" / "fixtures" / "node" / "xid79_ecc_kern.log"
    runs.append((f"node-kernel:{kern.relative_to(ROOT)}", ["node", "--no-host", "--gpu-backend", "none",
                                                           "--kernel-log", str(kern)]))
    scan_dir = ROOT / "tests" / "fixtures" / "scan"
    runs.append((f"scan:{scan_dir.relative_to(ROOT)}", ["scan", "--no-config", str(scan_dir)]))
    metrics = ROOT / "tests" / "corpus" / "metrics"
    for dumps in ROUTER_DUMPS:
        argv = ["logs"]
        for name in dumps:
            argv += ["--router-stats-dump", str(metrics / name)]
        runs.append((f"router-stats:{'+'.join(dumps)}", argv))
    for path in sorted((ROOT / "tests" / "fixtures" / "report").glob("load-*.json")):
        runs.append((f"load:{path.relative_to(ROOT)}", ["--judge", "load", str(path)]))
    runs.extend((f"route:{name}", ["--judge", "route", name]) for name in ROUTE_SCENARIOS)
    for path in sorted((ROOT / "tests" / "corpus" / "profile" / "recorded").glob("*.json.gz")):
        runs.append((f"profile:{path.relative_to(ROOT)}", ["--judge", "profile", str(path)]))
    return runs


def route_evidence(name: str) -> Any:
    """One hand-built ``RouteEvidence`` (tests/route/builders.py, as the route rule tests build them)."""
    from dataclasses import replace

    from tests.route.builders import B1, B2, B3, BackendSpec, Scenario, evidence, healthy

    from infradoctor.route.evidence import ConnectProbe, Retries, TimeoutCluster
    from infradoctor.route.stats import Estimate
    from infradoctor.telemetry.evidence import GaugeSeries, RouterEvidence, RouterWindow

    def probe(path: str, p50: float, failures: int = 0) -> ConnectProbe:
        return ConnectProbe(path, f"{path}:80", 50, {"connect_timeout": failures} if failures else {}, p50, p50 * 2)

    def stats(kind: str, counters: dict[str, float], gauges: dict[str, float] | None = None) -> RouterEvidence:
        window = RouterWindow(f"http://{kind}-admin", kind, f"{kind}-json", 3, 0, counters=counters,
                              gauges={k: GaugeSeries(v, v, v) for k, v in (gauges or {}).items()})
        return RouterEvidence(window, client_requests=300)

    two = [BackendSpec(B1), BackendSpec(B2)]
    if name == "healthy":
        return evidence(Scenario([BackendSpec(B1), BackendSpec(B2), BackendSpec(B3)]))
    if name == "router-overhead":
        return evidence(Scenario(two, router_ms=8.0))
    if name == "router-overhead-one-backend":
        return evidence(Scenario([*two, BackendSpec(B3, router_extra_ms=6.0)]))
    if name == "router-overhead-p99":
        ev = evidence(Scenario(two))
        return replace(ev, attribution=replace(ev.attribution, added_p99=Estimate(40.0, 25.0, 60.0)))
    if name == "slow-backends":
        return evidence(Scenario([BackendSpec(B1, latency_ms=400, jitter_ms=30),
                                  BackendSpec(B2, latency_ms=420, jitter_ms=30)], router_ms=1.0))
    if name == "failing-backend":
        return evidence(Scenario([BackendSpec(B1), BackendSpec(B2, error_rate=0.2), BackendSpec(B3)]))
    if name == "down-backend":
        return evidence(Scenario([BackendSpec(B1), BackendSpec(B2, down=True)]))
    if name == "slow-backend":
        return evidence(Scenario([BackendSpec(B1), BackendSpec(B2, latency_ms=40, jitter_ms=2), BackendSpec(B3)]))
    if name == "uneven":
        return evidence(Scenario([BackendSpec(B1, weight=3), BackendSpec(B2, weight=1)], requests_per_path=400))
    flaky = [BackendSpec(B1, error_rate=0.5, error="http_503"), BackendSpec(B2)]
    if name == "retries-upstream-list":
        return evidence(Scenario(flaky, retry_on_error=True))
    if name == "retries-attempt-header":
        return evidence(Scenario(flaky, retry_on_error=True, attempt_header=True))
    if name == "retries-counters":
        return replace(evidence(Scenario([BackendSpec(B1)])),
                       retries=Retries("backend-counters", client_requests=100, backend_attempts=160))
    if name == "all-down":
        return evidence(Scenario([BackendSpec(B1, down=True), BackendSpec(B2, down=True)]))
    if name == "connects-flaky":
        return replace(evidence(Scenario(two)), connect=(probe("router", 0.1), probe(B1, 0.1, 5), probe(B2, 0.1)))
    if name == "connects-slow":
        return replace(evidence(Scenario(two)), connect=(probe("router", 0.1), probe(B1, 0.12), probe(B2, 12.0)))
    if name == "router-timeout":
        return evidence(Scenario([BackendSpec(B1, latency_ms=300, jitter_ms=80)], router_timeout_ms=250))
    if name == "client-timeout":
        cluster = TimeoutCluster(2000.0, 12, 12, {"read_timeout": 12}, 3.0, None, None)
        return replace(evidence(Scenario([BackendSpec(B1)])), timeout=cluster, client_timeout_s=2.0)
    if name == "health-mismatch":
        return evidence(Scenario([BackendSpec(B1), BackendSpec(B2, error_rate=0.4)],
                                 health={B1: healthy(B1), B2: healthy(B2)}))
    if name == "cold-backend":
        return evidence(Scenario([BackendSpec(B1, cold_requests=5, cold_ms=200), BackendSpec(B2)]))
    if name == "mixed":
        return evidence(Scenario([BackendSpec(B1, weight=3), BackendSpec(B2, error_rate=0.3)], router_ms=6))
    if name == "overhead-with-envoy-retries":
        return replace(evidence(Scenario(two, router_ms=25.0)), router_stats=stats(
            "envoy", {"requests": 324, "retries": 24, "retry_backoff": 24, "retry_success": 24, "connect_fail": 24}))
    if name == "overhead-with-haproxy-queue":
        return replace(evidence(Scenario(two, router_ms=25.0)), router_stats=stats(
            "haproxy", {"requests": 300}, {"pending_active": 3.0, "queue_time_ms": 4.0}))
    raise ValueError(f"unknown route scenario {name!r}")


def judge(kind: str, arg: str) -> dict[str, Any]:
    """Findings of recorded evidence judged by the rules of this interpreter's infradoctor (a result's JSON form)."""
    from infradoctor.findings import run_rules

    if kind == "load":
        from infradoctor.load.evidence import LoadEvidence

        result = json.loads(Path(arg).read_text(encoding="utf-8"))
        findings = run_rules(LoadEvidence.from_metrics(result["metrics"]))
    elif kind == "route":
        if str(ROOT) not in sys.path:
            sys.path.append(str(ROOT))  # tests.route.builders
        findings = run_rules(route_evidence(arg))
    elif kind == "profile":
        from infradoctor.profile.rules import RuleOptions
        from infradoctor.profile_load.run import judge_bundle

        corpus = ROOT / "tests" / "corpus" / "profile"
        text = gzip.decompress(Path(arg).read_bytes()).decode("utf-8")
        root = json.loads(text).get("recorded_root")
        if root and root != str(corpus):
            text = text.replace(json.dumps(root)[1:-1], json.dumps(str(corpus))[1:-1])
        return judge_bundle(json.loads(text), RuleOptions(cwd=str(corpus))).to_dict()
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return {"findings": [f.to_dict() for f in findings]}


def normalise(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings without run-specific parts, in a stable order."""
    findings: list[dict[str, Any]] = result.get("findings") or []
    keep: list[dict[str, Any]] = []
    for finding in findings:
        keep.append({k: finding[k] for k in ("code", "name", "severity", "title", "evidence", "location", "fix")
                     if k in finding})
    return sorted(keep, key=lambda f: json.dumps(f, sort_keys=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--pythonpath", default=str(ROOT / "src"))
    parser.add_argument("--judge", nargs=2, metavar=("KIND", "ARG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.judge:
        json.dump(judge(*args.judge), sys.stdout)
        return 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((args.pythonpath, str(ROOT))), "COLUMNS": "120"}
    out: dict[str, object] = {}
    for name, argv in inputs():
        cmd = [args.python, "-m", "infradoctor", *argv, "--json", "-", "--no-store", "--quiet"]
        if argv[0] == "scan":
            cmd = [args.python, "-m", "infradoctor", *argv, "--format", "json", "--no-store"]
        elif argv[0] == "--judge":
            cmd = [args.python, str(Path(__file__).resolve()), *argv]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
        try:
            result = json.loads(proc.stdout)
        except json.JSONDecodeError:
            out[name] = {"exit": proc.returncode, "stderr": proc.stderr[-500:]}
            continue
        out[name] = {"exit": proc.returncode, "findings": normalise(result)}
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
