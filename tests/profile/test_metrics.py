"""Typed profile metrics: the JSON form the command has always written, read back exactly; the library entry."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from infradoctor.errors import UsageError
from infradoctor.metrics import json_schema
from infradoctor.profile.analyze import analyze, build_metrics
from infradoctor.profile.evidence import CallSite, Construction, LoadEvent, SyncSite
from infradoctor.profile.metrics import ModelModule, ProfileMetrics
from infradoctor.profile.result import ProfileRunOptions, build_result
from infradoctor.profile_load.run import ServiceLoadOptions
from infradoctor.report import FORMATS, render
from infradoctor.report.present.profile import sections
from infradoctor.result import Result

from .builders import evidence, module

STORED_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "report" / "batch-baseline.json"


def rich_evidence() -> Any:
    """Every list of the metrics filled: call sites, other modules, loads, constructions, allocations, host reads."""
    site = CallSite("/work/app/train.py", 42, "train", calls=5, time_s=0.1, batch_sizes={"32": 5},
                    kept_held_bytes=1_234_567)
    return evidence(
        exit_status=-9,
        exception={"type": "RuntimeError", "module": "builtins", "message": "boom", "file": "train.py", "line": 3,
                   "function": "main"},
        modules=(module(call_sites=(site,)), module(id=2, cls="ReLU", params=0)),
        loads=(LoadEvent("torch.load", "/work/app/train.py", 9, 2, 0.5),),
        constructions=(Construction("/work/app/train.py", 4, 1, "Net", None),),
        alloc_sites=({"file": "train.py", "line": 5, "sampled": 3, "alive": 2, "alive_bytes": 4_000_000},),
        syncs=(SyncSite("item", "/work/app/train.py", 7, "train", 100, 0.01, 0.2, 0, 50),),
        data_modules={"Normalize": 3},
        h2d={"copies": 3, "bytes": 100, "pageable_copies": 1, "pageable_bytes": 10, "time_s": 0.1,
             "non_blocking_copies": 0, "pageable_sites": {"train.py:8": 1}},
        precision={"float32_matmul_precision": "highest", "allow_tf32": False, "capability": [8, 0]},
    )


def test_json_form_round_trips_exactly(result_validator) -> None:
    result = build_result(rich_evidence(), started_at="2026-11-29T10:00:00Z")
    result_validator(result)
    data = json.loads(result.to_json())["metrics"]
    assert json.dumps(ProfileMetrics.from_dict(data).to_dict()) == json.dumps(data)  # keys, order and values
    module_row = data["model"]["modules"][0]
    assert list(module_row)[:2] == ["class", "params"] and module_row["class"] == "Net"
    assert data["model"]["other_modules"][0]["class"] == "ReLU"
    assert data["model"]["constructions"][0] == {"class": "Net", "site": "/work/app/train.py:4", "count": 1,
                                                 "params": None}
    assert data["workload"]["exit_status"] == 137 and data["workload"]["exception"]["type"] == "RuntimeError"
    assert data["precision"] == {"float32_matmul_precision": "highest", "allow_tf32": False, "capability": [8, 0]}
    assert "load" not in data and "service" not in data  # a plain profile has no service side


def test_a_stored_run_from_an_older_version_still_reads() -> None:
    stored = json.loads(STORED_RUN.read_text(encoding="utf-8"))
    assert "python_program" not in stored["metrics"]["workload"]
    metrics = ProfileMetrics.from_dict(stored["metrics"])
    assert metrics.workload.python_program and metrics.memory.child_processes == 0
    assert sections(Result.from_dict(stored))[0].title == "Where the time goes"


def test_json_keys_that_are_not_python_names() -> None:
    defs: dict[str, Any] = {}
    json_schema(ModelModule, defs)
    assert "class" in defs["modelModule"]["properties"] and "cls" not in defs["modelModule"]["properties"]
    assert "class" in defs["modelModule"]["required"]
    row = build_metrics(analyze(rich_evidence())).model.modules[0]
    assert ModelModule.from_dict(row.to_dict()) == row


def test_metrics_that_do_not_fit_are_said_not_crashed() -> None:
    broken = Result.from_dict({**json.loads(STORED_RUN.read_text(encoding="utf-8")), "metrics": {"steps": 3}})
    [section] = sections(broken)
    assert "metrics could not be read" in section.lines[0]
    for fmt in FORMATS:
        render(broken, fmt)


def test_options_that_cannot_run_are_usage_errors() -> None:
    from infradoctor.profile import run
    from infradoctor.profile_load.run import run as profile_command

    for options in (ProfileRunOptions(()), ProfileRunOptions(("python",), max_steps=0),
                    ProfileRunOptions(("python",), duration_s=0.0), ProfileRunOptions(("python",), sample_interval_s=0)):
        with pytest.raises(UsageError):
            run(options)
    with pytest.raises(UsageError, match="does not apply"):
        profile_command(ProfileRunOptions(("python", "server.py"), max_steps=5), ServiceLoadOptions("http://x/"))


@pytest.mark.integration
def test_the_library_entry_runs_a_workload_and_hands_over_its_evidence(tmp_path: Path, result_validator) -> None:
    from infradoctor.profile import run
    from infradoctor.profile_load.run import judge_bundle

    script = tmp_path / "work.py"
    script.write_text("import time\nprint('working')\ntime.sleep(0.3)\n")
    bundles: list[dict[str, Any]] = []
    out = tmp_path / "stdout.txt"
    with out.open("w") as fh:
        result = run(ProfileRunOptions((sys.executable, str(script)), on_evidence=bundles.append, cwd=str(tmp_path),
                                       stdout=fh.fileno(), timeout_s=120))
    result_validator(result)
    assert result.command == "profile" and result.exit_status == 0
    assert out.read_text() == "working\n"
    metrics = ProfileMetrics.from_dict(result.metrics)
    assert metrics.workload.stop_reason == "exit" and metrics.workload.profile_kind == "cpu-only"
    [bundle] = bundles
    assert judge_bundle(bundle).metrics == result.metrics  # the saved evidence judges to the same metrics
