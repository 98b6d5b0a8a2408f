"""The real-world log corpus (tests/corpus/logs): every file against its judged expectations and stored results.

Judged expectations (expected.json, from reading each file): no false critical or high finding, every expected
finding present within its ``severity_at_most``, every failure line of a signature the catalog knows found whatever
its envelope (the counts equal, except the disputed counts of corpus_score.DISPUTED, each with its reason), and at
least 95% of the lines of a supported format decoded inside envelopes and without. Stored results (results.json,
written by ``scripts/corpus_logs.py --write``): format, lines, per-format counts, envelopes, signature counts and
findings per file stay what they were, so any change shows up as a diff to judge.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from infradoctor.logs.analyze import LogsOptions, run
from infradoctor.logs.signatures import BY_ID

from .corpus_score import CORPUS, FILE_OPTIONS, CorpusScore, FileScore, load_expected, score_file, snapshot

EXPECTED = load_expected()
STORED = json.loads((CORPUS / "results.json").read_text(encoding="utf-8"))
GOAL_DECODED = 0.95


def options_for(name: str) -> LogsOptions:
    extra = FILE_OPTIONS.get(name, [])
    envoy = extra[extra.index("--envoy-log-format") + 1] if "--envoy-log-format" in extra else None
    return LogsOptions(files=(str(CORPUS / name),), envoy_log_format=envoy)


@cache
def result_of(name: str) -> dict[str, Any]:
    return run(options_for(name)).to_dict()


@cache
def score_of(name: str) -> FileScore:
    return score_file(name, EXPECTED[name], result_of(name), set(BY_ID))


def test_every_corpus_file_has_expectations_and_results() -> None:
    files = {p.name for p in CORPUS.glob("*.log")}
    assert files == set(EXPECTED) == set(STORED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_file_meets_its_expectations(name: str, result_validator) -> None:
    result_validator(result_of(name))
    score = score_of(name)
    assert not score.false_findings, score.false_findings
    assert not score.missing_findings, score.missing_findings
    assert not score.signature_mismatches, score.signature_mismatches


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_file_gives_its_stored_results(name: str) -> None:
    assert snapshot(result_of(name)) == STORED[name]


def test_lines_of_supported_formats_are_decoded_inside_envelopes() -> None:
    totals = CorpusScore([score_of(name) for name in EXPECTED]).totals()
    for key in ("decoded_enveloped", "decoded_bare"):
        decoded, supported = totals[key]
        assert decoded >= GOAL_DECODED * supported, (key, decoded, supported)
    found, expected = totals["known_signatures_found"]
    disputed = sum(e - f for s in map(score_of, EXPECTED) for e, f in s.disputed.values() if e > f)
    assert found + disputed == expected


def test_the_keyvalue_line_is_read_without_its_format_string_too() -> None:
    name = "envoy_keyvalue_custom.log"
    result = run(LogsOptions(files=(str(CORPUS / name),))).to_dict()
    score = score_file(name, EXPECTED[name], result, set(BY_ID))
    assert not score.false_findings and not score.missing_findings and not score.signature_mismatches
    assert result["metrics"]["files"][0]["formats"] == {"keyvalue": 1}
