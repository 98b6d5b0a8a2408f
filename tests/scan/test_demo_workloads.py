"""The demo's bundled workloads: the sick ones show what scan finds, the fixed ones must give nothing.

The fixed service loads its model in a FastAPI lifespan, which is the fix C001/C003 recommend; scan once reported
C003 there (a start-up hook is not a request path).
"""

from __future__ import annotations

from pathlib import Path

import infradoctor
from infradoctor.scan.engine import ScanOptions, scan_paths

WORKLOADS = Path(infradoctor.__file__).resolve().parent / "demo" / "workloads"


def test_the_fixed_workloads_give_no_findings() -> None:
    fixed = sorted(WORKLOADS.glob("*_fixed.py"))
    assert {p.name for p in fixed} >= {"serve_fixed.py", "batch_fixed.py", "train_fixed.py"}
    report = scan_paths(fixed, ScanOptions(use_config=False))
    assert report.unchecked == ()
    assert [f"{v.path}:{v.line}: {v.code} {v.message}" for v in report.violations] == []


def test_the_sick_workloads_still_show_their_problems() -> None:
    sick = sorted(WORKLOADS.glob("*_sick.py"))
    found = {(Path(v.path).name, v.code) for v in scan_paths(sick, ScanOptions(use_config=False)).violations}
    assert {("serve_sick.py", "C001"), ("serve_sick.py", "C003"), ("serve_sick.py", "C004"),
            ("train_sick.py", "C009")} <= found
    assert ("batch_sick.py", "C007") not in found  # C007 is a preview rule: it runs when selected by its code
    selected = scan_paths(sick, ScanOptions(use_config=False, select=("C0", "C007"))).violations
    assert ("batch_sick.py", "C007") in {(Path(v.path).name, v.code) for v in selected}
