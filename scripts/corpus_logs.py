#!/usr/bin/env python3
"""Run `infradoctor logs` over the real-world log corpus (tests/corpus/logs) and score it against expected.json.

Each file is analysed alone in `--format auto` by a fresh process (`python -m infradoctor logs FILE --json OUT
--no-store -q`, with the interpreter and PYTHONPATH given, so the frozen baseline and the live code can be compared),
plus the per-file options of tests/logs/corpus_score.py (the Envoy key=value format string). Printed: per file the
format, lines decoded / supported, signatures found / expected, false and missing findings; then the totals (lines of
a supported format decoded inside and outside envelopes, failure lines found, false critical/high findings).

`--write` stores the live code's results per file in tests/corpus/logs/results.json (format, lines, per-format
counts, envelopes, signature counts, findings by code and severity): the test suite checks the code against them.

Examples:
    scripts/corpus_logs.py --pythonpath /work/baseline/src            # the baseline
    scripts/corpus_logs.py --pythonpath src                           # this tree
    scripts/corpus_logs.py --pythonpath src --write                   # refresh results.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "logs"))
sys.path.insert(0, str(ROOT / "src"))

from corpus_score import CORPUS, FILE_OPTIONS, CorpusScore, load_expected, score_file, snapshot  # noqa: E402

RESULTS = CORPUS / "results.json"


def run_file(python: str, pythonpath: str, path: Path, extra: list[str], out: Path) -> dict[str, Any]:
    """The result JSON of one file."""
    env = {**os.environ, "PYTHONPATH": pythonpath, "NO_COLOR": "1"}
    proc = subprocess.run([python, "-m", "infradoctor", "logs", str(path), "--json", str(out), "--no-store", "-q",
                           *extra], env=env, capture_output=True, text=True, timeout=300, check=False)
    if not out.exists():
        raise RuntimeError(f"{path.name}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable, help="interpreter to run (default: this one)")
    parser.add_argument("--pythonpath", default=str(ROOT / "src"), help="PYTHONPATH of the code to score")
    parser.add_argument("--write", action="store_true", help=f"store the results in {RESULTS.relative_to(ROOT)}")
    parser.add_argument("--json", type=Path, help="write the scores and totals here")
    parser.add_argument("--verbose", "-v", action="store_true", help="print every file's mismatches")
    args = parser.parse_args(argv)
    from infradoctor.logs.signatures import BY_ID

    known = set(BY_ID)
    expected = load_expected()
    scores = []
    snapshots: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="corpus_logs_") as tmp:
        for name, entry in expected.items():
            result = run_file(args.python, args.pythonpath, CORPUS / name, FILE_OPTIONS.get(name, []),
                              Path(tmp) / f"{name}.json")
            score = score_file(name, entry, result, known)
            scores.append(score)
            snapshots[name] = snapshot(result)
            flag = "FALSE" if score.false_findings else ("miss" if score.missing_findings else "ok")
            fmt = snapshots[name]["format"] or "-"
            print(f"{name:42} {fmt:12} decoded {score.decoded:3}/{score.lines_supported:<3}"
                  f" sigs {score.signatures_found:3}/{score.signatures_expected:<3} {flag}")
            if args.verbose:
                for line in (*score.false_findings, *(f"missing {m}" for m in score.missing_findings),
                             *(f"signature {k}: expected {e}, found {f}" for k, (e, f) in
                               score.signature_mismatches.items()),
                             *(f"unsupported signature name {u}" for u in score.unsupported),
                             *score.minor_unexpected):
                    print(f"    {line}")
    totals = CorpusScore(scores).totals()
    print(json.dumps(totals, indent=1))
    if args.write:
        RESULTS.write_text(json.dumps(snapshots, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    if args.json:
        args.json.write_text(json.dumps({"totals": totals, "files": [s.__dict__ for s in scores]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
