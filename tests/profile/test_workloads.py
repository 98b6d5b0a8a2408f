"""The example workloads under the real profiler: each defect is the top finding; healthy controls stay clean."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from infradoctor.findings import Severity
from infradoctor.profile.launcher import ProfileOptions
from infradoctor.profile.result import profile_run
from infradoctor.profile.rules import RuleOptions

WORKLOADS = Path(__file__).resolve().parents[2] / "examples" / "workloads"

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# script -> (code, text of the line the finding must point at)
DEFECTS = {
    "data_starved_training.py": ("P001", "loader = DataLoader("),
    "per_sample_inference.py": ("P002", "logits = model(inputs[i : i + 1])"),
    "inference_without_no_grad.py": ("P003", "pred = model(xb)"),
    "eval_in_train_mode.py": ("P004", "correct += int((model(xb)"),
    # on the CPU a per-element .item() loop is slow Python, not a device sync (that is P005, with a GPU in use)
    "item_in_hot_loop.py": ("P012", "if pred[j].item() == yb[j].item():"),
    "weights_reloaded_per_batch.py": ("P006", "torch.load(checkpoint"),
    "outputs_kept_with_graph.py": ("P007", "outputs.append(model(xb))"),
}


def line_of(script: str, text: str) -> int:
    lines = (WORKLOADS / script).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def run(script: str, *args: str):
    return profile_run([sys.executable, str(WORKLOADS / script), *args],
                       ProfileOptions(cwd=str(WORKLOADS)), RuleOptions(cwd=str(WORKLOADS)), timeout_s=100)


@pytest.mark.parametrize("script", sorted(DEFECTS))
def test_defect_is_the_top_finding(script: str, result_validator) -> None:
    code, text = DEFECTS[script]
    result = run(script)
    result_validator(result)
    assert result.exit_status == 0 and not result.errors, result.errors
    top = result.ranked()[0]
    assert top.code == code, [(f.code, f.title) for f in result.ranked()]
    assert top.location is not None and (top.location.file, top.location.line) == (script, line_of(script, text))
    assert top.severity.rank >= Severity.MEDIUM.rank
    assert result.metrics["steps"]["count"] >= 10


@pytest.mark.parametrize("script", ["healthy_training.py", "healthy_inference.py"])
def test_healthy_controls_have_nothing_above_low(script: str, result_validator) -> None:
    result = run(script)
    result_validator(result)
    assert result.exit_status == 0 and not result.errors
    above_low = [(f.code, f.title) for f in result.findings if f.severity.rank > Severity.LOW.rank]
    assert above_low == []
    metrics = result.metrics
    assert metrics["headline"]["samples_per_s"] > 0
    assert metrics["steps"]["boundary"] == ("optimizer" if "training" in script else "dataloader")
    assert 0 < len(metrics["distributions"]["step_time_ms"]) <= 5000
    assert metrics["model"]["alloc_sites"] == []  # no growth suspected: allocation sampling never started
    fractions = metrics["steps"]["phase_fraction"]
    assert sum(fractions.values()) == pytest.approx(1.0, abs=0.02)


def test_instrumentation_does_not_change_results(tmp_path: Path) -> None:
    import subprocess

    import torch

    plain, profiled = tmp_path / "plain.pt", tmp_path / "profiled.pt"
    subprocess.run([sys.executable, str(WORKLOADS / "healthy_training.py"), "--out", str(plain)],
                   cwd=WORKLOADS, check=True, capture_output=True, timeout=100)
    result = run("healthy_training.py", "--out", str(profiled))
    assert result.exit_status == 0
    a, b = torch.load(plain, weights_only=True), torch.load(profiled, weights_only=True)
    assert torch.equal(a["logits"], b["logits"])
    assert all(torch.equal(a["state"][k], b["state"][k]) for k in a["state"])


def test_cli_terminal_summary_and_stored_run(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(WORKLOADS)
    out = cli("profile", "--label", "baseline", "--json", str(tmp_path / "r.json"), "--",
              sys.executable, "data_starved_training.py")
    assert out.exit_code == 0
    text = out.stdout
    assert "Step time per steady step" in text and "data wait" in text  # the breakdown bar
    assert "samples/s" in text and "peak RSS MB" in text
    assert "HIGH     P001 data-starvation" in text
    assert "at data_starved_training.py:" in text and "num_workers=" in text
    assert "step 40 loss" not in text  # the workload's own stdout went to the real stdout, not ours
    shown = cli("show", "--format", "md")
    assert shown.exit_code == 0 and "P001" in shown.stdout and "baseline" in shown.stdout
