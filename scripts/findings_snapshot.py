"""Findings of the file-driven commands over the repository's recorded inputs, normalised for diffing.

Runs ``logs``, ``node`` and ``scan`` (the commands whose input is a file, so whose findings are deterministic) over
every recorded input in tests/fixtures and tests/corpus, and prints one JSON document: per input, the findings'
code, name, severity, title, evidence and location. Timestamps, ids and durations are left out. Use it to show that
a refactor changed no diagnosis:

    python scripts/findings_snapshot.py > before.json   # on the old commit
    python scripts/findings_snapshot.py > after.json    # on the new one
    diff before.json after.json

``--python`` and ``--pythonpath`` choose the interpreter and code to run (default: this interpreter, this checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def inputs() -> list[tuple[str, list[str]]]:
    """(name, command arguments) for every recorded input."""
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
    return runs


def normalise(result: dict[str, object]) -> list[dict[str, object]]:
    """The findings without run-specific parts, in a stable order."""
    findings = result.get("findings") or []
    keep = []
    for finding in findings:  # type: ignore[union-attr]
        keep.append({k: finding[k] for k in ("code", "name", "severity", "title", "evidence", "location", "fix")
                     if k in finding})
    return sorted(keep, key=lambda f: json.dumps(f, sort_keys=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--pythonpath", default=str(ROOT / "src"))
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": args.pythonpath, "COLUMNS": "120"}
    out: dict[str, object] = {}
    for name, argv in inputs():
        cmd = [args.python, "-m", "infradoctor", *argv, "--json", "-", "--no-store", "--quiet"]
        if argv[0] == "scan":
            cmd = [args.python, "-m", "infradoctor", *argv, "--format", "json", "--no-store"]
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
