"""Each rule's fixture (positives marked `# ERROR`, near-miss negatives marked `# ok`) against its expected output.

A fixture `tests/fixtures/scan/C0xx_*.py` runs with only its rule selected; the output must equal the `.txt` beside
it, and the reported lines must be exactly the lines marked `# ERROR`. The output shows `[*]` for a safe fix,
`[unsafe fix]` for one only `--unsafe-fixes` applies, and a severity other than the rule's default in parentheses.
Fixtures reduced from real code say where they come from (the scan corpus, tests/corpus/scan). Regenerate the
`.txt` files after a reviewed change with `INFRADOCTOR_UPDATE_FIXTURES=1 pytest tests/scan/test_rule_fixtures.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infradoctor.scan.config import SCAN_CODES
from infradoctor.scan.engine import scan_source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scan"
CASES = sorted(p for p in FIXTURES.glob("C0*.py"))


def render(path: Path) -> tuple[str, set[int]]:
    code = path.name[:4]
    violations = scan_source(path.read_text(encoding="utf-8"), path.name, select={code})
    lines = []
    for v in violations:
        marks = " [*]" if v.fixable else (" [unsafe fix]" if v.unsafe_fix else "")
        severity = f" ({v.severity.value})" if v.severity is not None else ""
        lines.append(f"{v.path}:{v.line}:{v.column}: {v.code}{marks}{severity} {v.message}")
    return "".join(line + "\n" for line in lines), {v.line for v in violations}


def marked_lines(path: Path) -> set[int]:
    return {n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "# ERROR" in line}


def test_every_scan_code_has_a_fixture() -> None:
    covered = {p.name[:4] for p in CASES}
    assert covered == set(SCAN_CODES)


@pytest.mark.parametrize("fixture", CASES, ids=[p.stem for p in CASES])
def test_rule_fixture(fixture: Path) -> None:
    output, reported = render(fixture)
    expected_file = fixture.with_suffix(".txt")
    if os.environ.get("INFRADOCTOR_UPDATE_FIXTURES"):
        expected_file.write_text(output, encoding="utf-8")
    rule = fixture.name[:4]
    assert reported == marked_lines(fixture), (
        f"{rule}: reported lines {sorted(reported)} != lines marked # ERROR {sorted(marked_lines(fixture))}"
    )
    assert output == expected_file.read_text(encoding="utf-8"), f"{rule}: output differs from {expected_file.name}"
