import re
from pathlib import Path

import pytest

from infradoctor.findings import (
    DOC_SECTIONS,
    EVIDENCE_SECTION,
    Finding,
    Location,
    Rule,
    Severity,
    UnknownCodeError,
    catalog,
    make_finding,
    rank_findings,
    render_doc,
    rule,
    run_rules,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "infradoctor"


def test_codes_and_names_never_change() -> None:
    # Codes and names are stable forever (users' CI and suppressions depend on them): new codes are appended to
    # tests/fixtures/catalog.txt (which holds DESIGN.md's catalog); an existing line never changes.
    snapshot = (Path(__file__).resolve().parents[1] / "fixtures" / "catalog.txt").read_text().split("\n")
    pinned = dict(line.split(" ", 1) for line in snapshot if line.strip())
    assert {code: catalog()[code].name for code in pinned if code in catalog()} == pinned
    assert set(pinned) <= set(catalog()), "a code was removed from the catalog"
    assert set(catalog()) <= set(pinned), "a new code must be appended to tests/fixtures/catalog.txt"


def test_catalog_entries_are_complete() -> None:
    for code, entry in catalog().items():
        assert entry.code == code
        assert entry.group == code[0]
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", entry.name)
        assert entry.title and entry.fix and entry.risk and entry.commands


def test_one_module_per_code_with_documented_sections_in_order() -> None:
    modules = [entry.module for entry in catalog().values()]
    assert len(modules) == len(set(modules)), "two codes share a module"
    for code, entry in catalog().items():
        assert entry.module.split(".")[-1].startswith(code.lower() + "_"), (code, entry.module)
        sections = entry.sections()
        # the optional Evidence section sits between "How it is measured" and "Fix"
        order = [s for s in sections if s != EVIDENCE_SECTION]
        assert order[1:5] == list(DOC_SECTIONS), (code, list(sections))
        if EVIDENCE_SECTION in sections:
            assert list(sections).index(EVIDENCE_SECTION) == list(sections).index("Fix") - 1, code
        assert all(sections[s] for s in DOC_SECTIONS), code


def test_rule_docs_show_threshold_values_not_markup() -> None:
    doc = rule("P001").doc
    assert "DATA_WAIT_FRACTION = 0.3" in doc and "``" not in doc and ":data:" not in doc
    assert render_doc("at :data:`LIMIT` and ``other``", {"LIMIT": 0.25}) == "at LIMIT = 0.25 and `other`"


def test_every_rule_with_checks_runs_through_run_rules() -> None:
    for entry in catalog().values():
        for check in entry.checks:
            assert check.evidence is not object, entry.code
        if entry.group != "C":
            assert entry.checks, f"{entry.code} has no check"


def test_run_rules_dispatches_by_evidence_type_and_ranks() -> None:
    class Evidence:
        pass

    probe = Rule("P999", "probe-rule", Severity.LOW, "probe", fix="f", risk="r", commands=("profile",))

    @probe.check(Evidence)
    def check(ev: Evidence, options: None) -> list[Finding]:
        return [probe.finding("seen")]

    assert probe.checks_for(Evidence()) and not probe.checks_for(object())
    assert run_rules(object()) == []  # no rule reads a bare object
    assert check(Evidence(), None)[0].code == "P999"


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
        rule("not-a-rule")
    assert rule("data-starvation").code == "P001"
    assert rule("p001").code == "P001"


def test_ranking_by_severity_then_impact() -> None:
    low = make_finding("P008", "cold")
    high_small = make_finding("P001", "a", impact=0.1)
    high_big = make_finding("P006", "b", impact=0.6)
    assert [f.code for f in rank_findings([low, high_small, high_big])] == ["P006", "P001", "P008"]


def test_severity_parse() -> None:
    assert Severity.parse("HIGH") is Severity.HIGH
    with pytest.raises(ValueError, match="expected one of"):
        Severity.parse("urgent")


def test_catalog_commands_match_the_evidence_rules_read() -> None:
    # A check over one command's evidence makes that command emit the code (load's rules also run under
    # `profile --load-url`, serve's only there; scan's rules are syntax-tree hooks).
    from infradoctor.fleet.evidence import FleetEvidence, OnsetEvidence
    from infradoctor.load.evidence import LoadEvidence
    from infradoctor.logs.evidence import LogsEvidence
    from infradoctor.node.containers import ContainerEvidence
    from infradoctor.node.evidence import NodeEvidence
    from infradoctor.profile.analyze import ProfileAnalysis
    from infradoctor.route.evidence import RouteEvidence
    from infradoctor.telemetry.evidence import RouterEvidence, ServerEvidence

    # `fleet` also runs the node, router and server rules over NodeEvidence, RouterEvidence and ServerEvidence it
    # builds from Prometheus; that is not listed per rule.
    commands = {LoadEvidence: {"load", "profile"}, LogsEvidence: {"logs"}, NodeEvidence: {"node"},
                ProfileAnalysis: {"profile"}, RouteEvidence: {"route"}, RouterEvidence: {"route", "load"},
                ServerEvidence: {"route", "load"}, FleetEvidence: {"fleet"}, ContainerEvidence: {"fleet"},
                OnsetEvidence: {"fleet"}}
    for code, entry in catalog().items():
        if entry.group == "C":
            assert entry.commands == ("scan",)
            continue
        emitted = set().union(*(commands.get(c.evidence, {"profile"}) for c in entry.checks))
        assert set(entry.commands) == emitted, (code, entry.commands, sorted(emitted))
