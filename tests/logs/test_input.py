"""Input the logs command cannot measure (exit 3, partial result), standard input, and the missing fast engine."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_json(cli, tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    out = tmp_path / "out.json"
    run = cli("logs", *args, "--json", str(out), "--no-store", "-q")
    return run.exit_code, json.loads(out.read_text()), run.stderr


def truncated_gzip(tmp_path: Path, source: Path) -> Path:
    """The gzip of ``source`` cut in half: what a log rotated while it was being copied looks like."""
    data = gzip.compress(source.read_bytes())
    path = tmp_path / f"{source.name}.gz"
    path.write_bytes(data[: len(data) // 2])
    return path


def test_truncated_gzip_is_unmeasured(cli, tmp_path: Path, logs_dir: Path, result_validator) -> None:
    cut = truncated_gzip(tmp_path, logs_dir / "nginx_upstream.log")
    code, data, stderr = run_json(cli, tmp_path, str(cut))
    assert code == 3  # the partial result is still written
    result_validator(data)
    [row] = data["metrics"]["files"]
    assert row["parsed"] == 0 and row["error"] == "read_error" and row["skipped"]["read_error"] >= 1
    assert any(e["source"] == "logs:unmeasured" and cut.name in e["message"] for e in data["errors"])
    assert "no file yielded a parsed line" in stderr and "read_error" in stderr
    # With a readable file next to it the run is measured; the damaged file is still flagged.
    code, data, _ = run_json(cli, tmp_path, str(cut), str(logs_dir / "nginx_combined.log"))
    assert code == 0
    rows = {Path(f["file"]).name: f for f in data["metrics"]["files"]}
    assert rows[cut.name]["error"] == "read_error" and rows["nginx_combined.log"]["parsed"] > 0


def test_gzip_cut_after_many_lines_keeps_what_was_read(cli, tmp_path: Path, logs_dir: Path) -> None:
    lines = (logs_dir / "nginx_upstream.log").read_bytes() * 400  # ~7 MB: the cut lies after the first chunk
    data = gzip.compress(lines)
    path = tmp_path / "big.log.gz"
    path.write_bytes(data[: len(data) * 3 // 4])
    code, result, _ = run_json(cli, tmp_path, str(path), "--engine", "python")
    [row] = result["metrics"]["files"]
    assert code == 0 and row["parsed"] > 0 and row.get("error") is None
    assert row["skipped"]["read_error"] == 1
    assert any(e["source"] == "logs:read" for e in result["errors"])


def test_forced_format_matching_no_line_is_unmeasured(cli, tmp_path: Path, logs_dir: Path) -> None:
    kern = str(logs_dir / "kern.log")
    code, data, stderr = run_json(cli, tmp_path, kern, "--format", "nginx")
    assert code == 3
    [row] = data["metrics"]["files"]
    assert row["parsed"] == 0 and row["lines"] > 0 and row["error"] == "format_mismatch"
    assert row["skipped"]["format_mismatch"] == row["lines"]
    note = next(e for e in data["errors"] if e["source"] == "logs:unmeasured")
    assert "--format nginx" in note["message"] and "format_mismatch" in stderr
    code, data, _ = run_json(cli, tmp_path, kern, str(logs_dir / "nginx_upstream.log"), "--format", "nginx")
    assert code == 0
    assert [f.get("error") for f in data["metrics"]["files"]] == ["format_mismatch", None]
    # Auto-detection reads the same kernel log fine.
    code, data, _ = run_json(cli, tmp_path, kern)
    assert data["metrics"]["files"][0]["format"] == "kernel" and data["metrics"]["files"][0].get("error") is None


def test_blank_only_file_exits_3(cli, tmp_path: Path) -> None:
    blank = tmp_path / "blank.log"
    blank.write_text("\n\n   \n")
    code, data, _ = run_json(cli, tmp_path, str(blank))
    assert code == 3 and data["metrics"]["files"][0]["parsed"] == 0


def _pipe_into_logs(producer: list[str], tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    """``producer | python -m infradoctor logs - ARGS`` as two real processes joined by a pipe."""
    out = tmp_path / "stdin.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with subprocess.Popen(producer, stdout=subprocess.PIPE) as feeder:
        done = subprocess.run([sys.executable, "-m", "infradoctor", "logs", "-", *args, "--json", str(out),
                               "--no-store", "-q"], stdin=feeder.stdout, capture_output=True, text=True,
                              timeout=120, check=False, env=env)
        assert feeder.stdout is not None
        feeder.stdout.close()
        assert feeder.wait(timeout=30) == 0
    return done.returncode, json.loads(out.read_text()) if out.exists() else {}, done.stderr


def test_stdin_is_read_and_sniffed(tmp_path: Path, logs_dir: Path, cli, result_validator) -> None:
    recorded = logs_dir / "nginx_upstream.log"
    code, piped, stderr = _pipe_into_logs(["cat", str(recorded)], tmp_path)
    assert code == 0, stderr
    result_validator(piped)
    [row] = piped["metrics"]["files"]
    assert row["file"] == "<stdin>" and row["format"] == "nginx" and row["parsed"] == 95
    assert piped["target"]["files"] == ["-"]
    _, direct, _ = run_json(cli, tmp_path, str(recorded))
    for key in ("upstreams", "router_split", "attempts", "headline"):
        if key == "headline":
            assert {k: v for k, v in piped["metrics"][key].items() if k != "parse_mb_per_s"} == \
                {k: v for k, v in direct["metrics"][key].items() if k != "parse_mb_per_s"}
        else:
            assert piped["metrics"][key] == direct["metrics"][key], key
    # A compressed stream and another format: gzip is found by its magic bytes, the format by sniffing.
    code, envoy, stderr = _pipe_into_logs(["cat", str(logs_dir / "envoy_default.log.gz")], tmp_path)
    assert code == 0, stderr
    assert envoy["metrics"]["files"][0]["format"] == "envoy" and envoy["metrics"]["files"][0]["parsed"] > 0
    code, kernel, _ = _pipe_into_logs(["cat", str(logs_dir / "kern.log")], tmp_path, "--fail-on", "never")
    assert code == 0 and kernel["metrics"]["files"][0]["format"] == "kernel"
    assert {f["code"] for f in kernel["findings"]} >= {"N001"}


def test_empty_stdin_exits_3_and_dash_twice_is_a_usage_error(tmp_path: Path, cli) -> None:
    code, data, stderr = _pipe_into_logs(["true"], tmp_path)
    assert code == 3 and data["metrics"]["files"][0]["error"] == "empty"
    assert "<stdin> (empty)" in stderr
    run = cli("logs", "-", "-", "--no-store")
    assert run.exit_code == 2 and "only once" in run.stderr


def test_missing_fast_engine_is_noted(cli, tmp_path: Path, logs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(logs_dir / "nginx_upstream.log")
    _, with_polars, _ = run_json(cli, tmp_path, path, "--engine", "polars")
    assert not any(e["source"] == "logs.engine" for e in with_polars["errors"])
    monkeypatch.setitem(sys.modules, "polars", None)  # `import polars` now fails, as on an install without it
    code, without, _ = run_json(cli, tmp_path, path, "--engine", "polars")
    assert code == 0 and without["metrics"]["files"][0]["engine"] == "python"
    [note] = [e for e in without["errors"] if e["source"] == "logs.engine"]
    assert "not installed" in note["message"] and "pip install 'polars>=2.1'" in note["message"]
    assert without["metrics"]["upstreams"] == with_polars["metrics"]["upstreams"]
    # Small files use the Python engine by choice: no note then.
    _, small, _ = run_json(cli, tmp_path, path)
    assert not any(e["source"] == "logs.engine" for e in small["errors"])
