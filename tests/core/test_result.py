import json
from pathlib import Path
from typing import Any

import pytest

from infradoctor.findings import Location, make_finding
from infradoctor.result import ErrorNote, Result, new_result

PROFILE_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "report" / "batch-baseline.json"


def profile_metrics() -> dict[str, Any]:
    """A stored profile run's metrics (profile metrics are typed: the schema checks their shape)."""
    metrics: dict[str, Any] = json.loads(PROFILE_RUN.read_text(encoding="utf-8"))["metrics"]
    return metrics


def sample_result() -> Result:
    return new_result(
        "profile",
        started_at="2026-11-29T10:00:00Z",
        duration_s=12.3,
        target={"argv": ["python", "train.py"]},
        metrics={**profile_metrics(), "headline": {"samples_per_s": 812.5, "step_time_ms_p50": float("nan")}},
        findings=[
            make_finding("P008", "first steps slow"),
            make_finding("P001", "GPU waits for data 71% of each step", {"data_wait_fraction": 0.71},
                         location=Location("train.py", 42)),
        ],
        errors=[ErrorNote("gpu.nvml", "NVML library not found")],
    )


def test_round_trip_and_schema(result_validator) -> None:
    result = sample_result()
    data = json.loads(result.to_json())
    result_validator(data)
    again = Result.from_json(result.to_json())
    assert again.to_dict() == result.to_dict()
    assert data["findings"][0]["code"] == "P001"  # ranked: high before low
    assert data["metrics"]["headline"]["step_time_ms_p50"] is None  # strict JSON
    assert again.partial


def test_design_example_validates(result_validator) -> None:
    example = {
        "schema": "infradoctor.result/1",
        "command": "profile",
        "version": "0.1.0",
        "started_at": "2026-11-29T10:00:00Z",
        "duration_s": 12.3,
        "target": {"argv": ["python", "train.py"]},
        "metrics": profile_metrics(),  # (DESIGN.md leaves them out: {})
        "findings": [
            {"code": "P001", "name": "data-starvation", "severity": "high",
             "title": "GPU waits for data 71% of each step",
             "evidence": {"data_wait_fraction": 0.71, "steps": 60},
             "fix": "Raise DataLoader num_workers (try 4, then 8) ...",
             "location": {"file": "train.py", "line": 42}}
        ],
        "errors": [],
    }
    result_validator(example)
    assert Result.from_dict(example).findings[0].location == Location("train.py", 42)


def test_other_schema_refused() -> None:
    data = sample_result().to_dict()
    data["schema"] = "infradoctor.result/99"
    with pytest.raises(ValueError, match="unsupported result schema"):
        Result.from_dict(data)
