import re
from pathlib import Path

import pytest

from infradoctor.findings import (
    REGISTRY,
    Finding,
    Location,
    Severity,
    UnknownCodeError,
    iter_rule_modules,
    make_finding,
    rank_findings,
    rule_codes,
    spec,
)

DESIGN = Path(__file__).resolve().parents[3] / "shared" / "DESIGN.md"
SRC = Path(__file__).resolve().parents[2] / "src" / "infradoctor"


def design_catalog() -> dict[str, str]:
    text = DESIGN.read_text(encoding="utf-8")
    catalog = text.split("## Finding catalog", 1)[1].split("## Architecture", 1)[0]
    return dict(re.findall(r"\b([PSRNC]\d{3}) ([a-z0-9-]+)", catalog))


@pytest.mark.skipif(not DESIGN.exists(), reason="shared/DESIGN.md is not beside this checkout")
def test_registry_matches_design_catalog() -> None:
    expected = design_catalog()
    assert len(expected) == 62
    assert {code: s.name for code, s in REGISTRY.items()} == expected


def test_codes_and_names_never_change() -> None:
    # Codes and names are stable forever (users' CI and suppressions depend on them): new codes are appended to
    # tests/fixtures/catalog.txt; an existing line never changes.
    snapshot = (Path(__file__).resolve().parents[1] / "fixtures" / "catalog.txt").read_text().split("\n")
    pinned = dict(line.split(" ", 1) for line in snapshot if line.strip())
    assert {code: REGISTRY[code].name for code in pinned if code in REGISTRY} == pinned
    assert set(pinned) <= set(REGISTRY), "a code was removed from the registry"


def test_registry_entries_are_complete() -> None:
    for code, entry in REGISTRY.items():
        assert entry.code == code
        assert entry.group == code[0]
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", entry.name)
        assert entry.title and entry.fix and entry.risk and entry.commands


def test_make_finding_fills_catalog_defaults() -> None:
    finding = make_finding("P001", "waits 71%", {"data_wait_fraction": 0.71}, location=Location("t.py", 42))
    assert finding.name == "data-starvation"
    assert finding.severity is Severity.HIGH
    assert "num_workers" in finding.fix
    assert finding.risk
    assert Finding.from_dict(finding.to_dict()) == finding


def test_unregistered_code_is_refused() -> None:
    with pytest.raises(UnknownCodeError):
        make_finding("P999", "nope")
    with pytest.raises(UnknownCodeError):
        spec("not-a-rule")
    assert spec("data-starvation").code == "P001"
    assert spec("p001").code == "P001"


def test_every_code_emitted_in_source_is_registered() -> None:
    pattern = re.compile(r"""make_finding\(\s*["']([A-Z]\d{3})["']""")
    for path in SRC.rglob("*.py"):
        for code in pattern.findall(path.read_text(encoding="utf-8")):
            assert code in REGISTRY, f"{path}: emits unregistered code {code}"


def test_rule_modules_declare_registered_codes_and_documented_sections() -> None:
    for module in iter_rule_modules():
        codes = rule_codes(module)
        assert codes, f"{module.__name__} declares no CODE"
        for code in codes:
            assert code in REGISTRY, f"{module.__name__}: {code} not registered"
        doc = module.__doc__ or ""
        for section in ("What it detects", "Why it matters", "How it is measured", "Fix"):
            assert section in doc, f"{module.__name__} docstring lacks '{section}'"


def test_ranking_by_severity_then_impact() -> None:
    low = make_finding("P008", "cold")
    high_small = make_finding("P001", "a", impact=0.1)
    high_big = make_finding("P006", "b", impact=0.6)
    assert [f.code for f in rank_findings([low, high_small, high_big])] == ["P006", "P001", "P008"]


def test_severity_parse() -> None:
    assert Severity.parse("HIGH") is Severity.HIGH
    with pytest.raises(ValueError, match="expected one of"):
        Severity.parse("urgent")


def test_registry_commands_match_where_rules_live() -> None:
    # A rule module under infradoctor.<package>.rules is run by these commands (load's rules also run under
    # `profile --load-url`, serve's only there).
    runs_in = {"node": {"node"}, "profile": {"profile"}, "load": {"load", "profile"}, "route": {"route"},
               "logs": {"logs"}, "scan": {"scan"}, "serve": {"profile"}}
    emitted: dict[str, set[str]] = {}
    for module in iter_rule_modules():
        package = module.__name__.split(".")[1]
        for code in rule_codes(module):
            emitted.setdefault(code, set()).update(runs_in[package])
    for code, commands in emitted.items():
        assert set(REGISTRY[code].commands) == commands, (code, REGISTRY[code].commands, sorted(commands))
