"""The real-world PyTorch corpus (tests/corpus/profile): recorded runs judged by today's rules, against the
diagnosis written down from reading each script (expected.json).

Each entry of ``expected.json`` is a public script (or a variant with a defect planted the way people write it);
``recorded/NAME.json.gz`` is the evidence ``infradoctor profile --save-evidence`` kept when the script ran here
(``python run_corpus.py --record recorded``). The rules are pure functions of that evidence, so a rule change is
judged on 28 real runs in a second; the live runs themselves are in ``test_corpus_live.py`` (a few) and
``run_corpus.py`` (all, by hand).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from infradoctor.profile.metrics import ProfileMetrics
from infradoctor.profile.rules import RuleOptions
from infradoctor.profile_load.run import judge_bundle

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "profile"
EXPECTED = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))["scripts"]
RECORDED = CORPUS / "recorded"


def _runner() -> Any:
    spec = importlib.util.spec_from_file_location("run_corpus", CORPUS / "run_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RUNNER = _runner()


def judged(name: str) -> tuple[list[tuple[Any, ...]], list[str], dict[str, Any]]:
    """(rows, notes, result JSON) for one recorded entry, source paths pointed at this checkout's corpus."""
    text = gzip.decompress((RECORDED / f"{name}.json.gz").read_bytes()).decode("utf-8")
    root = json.loads(text).get("recorded_root")
    if root and root != str(CORPUS):
        text = text.replace(json.dumps(root)[1:-1], json.dumps(str(CORPUS))[1:-1])
    result = judge_bundle(json.loads(text), RuleOptions(cwd=str(CORPUS))).to_dict()
    rows, _, notes = RUNNER.judge(name, EXPECTED[name], result)
    return rows, notes, result


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_run_gets_the_written_diagnosis(name: str, result_validator: Any) -> None:
    rows, notes, result = judged(name)
    wrong = [r for r in rows if r[1] in ("missed", "wrong-line", "too-low", "false")]
    assert not wrong, (name, wrong)
    assert not notes, (name, notes)  # no transform taken for the model, no CPU-blind advice, the model found
    result_validator(result)  # the typed metrics' schema, plain runs and servers under load alike
    metrics = result["metrics"]
    assert json.dumps(ProfileMetrics.from_dict(metrics).to_dict()) == json.dumps(metrics)  # read back exactly


def test_the_corpus_summary() -> None:
    """Per finding code over the whole corpus: every planted defect found at its line, nothing false."""
    summary: dict[str, dict[str, int]] = {}
    high_on_unmodified = []
    for name, entry in EXPECTED.items():
        rows, _, result = judged(name)
        for code, verdict, *_ in rows:
            summary.setdefault(code, {}).setdefault(verdict, 0)
            summary[code][verdict] += 1
        if entry.get("variant_of") is None and any(f["severity"] == "high" for f in result["findings"]):
            high_on_unmodified.append(name)
    correct = sum(v.get("correct", 0) for v in summary.values())
    expected = sum(len(e.get("expected", [])) for e in EXPECTED.values())
    assert correct == expected == 25
    assert not any(v.get("false") for v in summary.values()), summary
    assert high_on_unmodified == []
