#!/usr/bin/env python3
"""Run `infradoctor node` over the GPU corpus and judge its findings against tests/corpus/gpu/expected.json.

Each document (31 `nvidia-smi -q -x` XML, 30 `nvidia-smi -q` text) is evaluated with
`node --smi-xml FILE --no-host --json - --no-store -q` by the interpreter and PYTHONPATH given, so the frozen
baseline and the live code can be compared. Every finding is judged:

- **true**: its code is expected for that document (on that GPU, if the entry names GPUs) within `severity_at_most`;
- **false**: its code is forbidden there, or it exceeds `severity_at_most` (counted as "false (severity)");
- **unlisted**: the document's entry says nothing about its code.

A `required` expected finding that is absent is a **miss**. The tests run the same judgement in-process
(tests/node/test_gpu_corpus.py); this script is for numbers before -> after.

Examples:
    scripts/corpus_gpu.py --pythonpath /work/baseline/src          # the baseline
    scripts/corpus_gpu.py --pythonpath src --json /tmp/after.json  # this checkout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus" / "gpu"
SEVERITIES = ("info", "low", "medium", "high", "critical")


@dataclass
class Verdicts:
    """The judgement of one document's findings."""

    true: list[str] = field(default_factory=list)
    false: list[str] = field(default_factory=list)
    false_severity: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)


def load_expected() -> dict[str, Any]:
    """expected.json without its ``_schema`` entry, by path relative to the corpus directory."""
    data = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))
    return {name: entry for name, entry in data.items() if not name.startswith("_")}


def _applies(entry: Mapping[str, Any], gpu: int | None) -> bool:
    gpus = entry.get("gpus")
    return not gpus or gpu in gpus


def judge(entry: Mapping[str, Any], findings: Iterable[Mapping[str, Any]]) -> Verdicts:
    """Judge ``findings`` (result JSON findings: code, severity, evidence.gpu) against one expected.json entry."""
    verdicts = Verdicts()
    found: list[tuple[str, str, int | None]] = []
    for finding in findings:
        gpu = (finding.get("evidence") or {}).get("gpu")
        code, severity = str(finding["code"]), str(finding["severity"])
        found.append((code, severity, gpu if isinstance(gpu, int) else None))
        label = f"{code} {severity}" + (f" gpu {gpu}" if gpu is not None else "")
        if any(f["code"] == code and _applies(f, gpu) for f in entry.get("findings_forbidden", ())):
            verdicts.false.append(label)
            continue
        allowed = [f for f in entry.get("findings_expected", ()) if f["code"] == code and _applies(f, gpu)]
        if not allowed:
            verdicts.unlisted.append(label)
        elif all(SEVERITIES.index(severity) > SEVERITIES.index(f["severity_at_most"]) for f in allowed):
            verdicts.false_severity.append(label)
        else:
            verdicts.true.append(label)
    for expected in entry.get("findings_expected", ()):
        if not expected.get("required"):
            continue
        for gpu in expected.get("gpus") or [None]:
            if not any(code == expected["code"] and (gpu is None or g == gpu) for code, _, g in found):
                verdicts.missed.append(expected["code"] + (f" gpu {gpu}" if gpu is not None else ""))
    return verdicts


def run_node(path: Path, python: str, pythonpath: str) -> tuple[int, dict[str, Any] | None, str]:
    """(exit code, result JSON or None, stderr) of `node --smi-xml PATH` with the given code."""
    env = {**os.environ, "PYTHONPATH": pythonpath, "NO_COLOR": "1"}
    proc = subprocess.run(
        [python, "-m", "infradoctor", "node", "--smi-xml", str(path), "--no-host", "--json", "-", "--no-store",
         "-q"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    try:
        result = json.loads(proc.stdout) if proc.stdout.strip() else None
    except ValueError:
        result = None
    return proc.returncode, result, proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--pythonpath", default=str(ROOT / "src"))
    parser.add_argument("--json", help="write per-document verdicts to this file")
    args = parser.parse_args()
    expected = load_expected()
    totals: Counter[str] = Counter()
    by_format: dict[str, Counter[str]] = {"xml": Counter(), "text": Counter()}
    report = {}
    for name, entry in sorted(expected.items()):
        code, result, stderr = run_node(CORPUS / name, args.python, args.pythonpath)
        findings = result["findings"] if result else []
        verdicts = judge(entry, findings)
        kind = "xml" if entry["format"] == "xml" else "text"
        counts = {"findings": len(findings), "true": len(verdicts.true), "false": len(verdicts.false),
                  "false_severity": len(verdicts.false_severity), "unlisted": len(verdicts.unlisted),
                  "missed": len(verdicts.missed), "unreadable": int(result is None or not result["metrics"]
                                                                   .get("gpu", {}).get("available", False))}
        totals.update(counts)
        by_format[kind].update(counts)
        report[name] = {"exit": code, **counts, "verdicts": verdicts.__dict__}
        marks = "; ".join(f"{k}: {', '.join(v)}" for k, v in verdicts.__dict__.items() if v)
        print(f"{name:60} exit {code}  {marks or 'no findings'}")
    print()
    for kind, counts in (*by_format.items(), ("all", totals)):
        print(f"{kind:5} findings {counts['findings']:3}  true {counts['true']:3}  false {counts['false']:3}  "
              f"false (severity) {counts['false_severity']:3}  unlisted {counts['unlisted']:3}  "
              f"missed required {counts['missed']:3}  unreadable documents {counts['unreadable']:3}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
