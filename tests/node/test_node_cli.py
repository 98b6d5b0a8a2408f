"""``infradoctor node`` end to end through the CLI: on this machine, and on the recorded GPU fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infradoctor.result import Result

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
GPU_CODES = {"N001", "N002", "N003", "N004", "N005", "N010", "N012"}


@pytest.fixture
def empty_log(tmp_path: Path) -> Path:
    path = tmp_path / "kern.log"
    path.write_text("Nov 24 00:00:00 node kernel: [    0.000000] Linux version 6.8.0\n", encoding="utf-8")
    return path


def run_node(cli, tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    out = tmp_path / "out.json"
    res = cli("node", "--json", str(out), *args)
    return res.exit_code, json.loads(out.read_text(encoding="utf-8")), res.stdout + res.stderr


def test_live_snapshot_validates_against_schema(cli, tmp_path: Path, result_validator) -> None:
    code, data, output = run_node(cli, tmp_path)
    assert code == 0, output
    result_validator(data)
    metrics = data["metrics"]
    assert metrics["host"]["cpu"]["logical_cores"] >= 1
    assert metrics["host"]["memory"]["total_bytes"] > 0
    assert any(d["mountpoint"] == "/" for d in metrics["host"]["disks"])
    assert metrics["headline"]["gpus"] == len(metrics["gpu"]["devices"])
    if not metrics["gpu"]["available"]:  # this machine: no GPU, a note instead
        assert any(e["source"].startswith("gpu") for e in data["errors"])
    assert "GPUs" in output and "Host" in output


def test_xid79_ecc_fixture_yields_n001_and_n002(cli, tmp_path: Path, result_validator) -> None:
    code, data, output = run_node(
        cli, tmp_path, "--no-host",
        "--nvml-record", str(FIXTURES / "xid79_ecc_8x_h100.nvml.json"),
        "--kernel-log", str(FIXTURES / "xid79_ecc_kern.log"),
    )
    assert code == 0, output
    result_validator(data)
    findings = data["findings"]
    xids = {f["evidence"]["xid"]: f for f in findings if f["code"] == "N001"}
    assert set(xids) == {13, 43, 63, 79, 94}
    assert xids[79]["severity"] == "critical" and xids[79]["evidence"]["action"] == "reboot"
    assert xids[79]["evidence"]["count"] == 2
    assert xids[94]["evidence"]["gpus"] == ["GPU 5 (00000000:AB:00.0)"]
    (ecc,) = [f for f in findings if f["code"] == "N002"]
    assert ecc["evidence"]["gpu"] == 5 and ecc["evidence"]["remapped_rows_pending"] is True
    assert ecc["evidence"]["volatile_uncorrected"] == 2
    assert findings[0]["code"] == "N001" and findings[0]["severity"] == "critical"  # ranked first
    # the GPU that fell off the bus cannot be read: a note and N012, and the other seven are still there
    assert any("GPU 2" in e["message"] and "GPU is lost" in e["message"] for e in data["errors"])
    (lost,) = [f for f in findings if f["code"] == "N012"]
    assert lost["evidence"] == {"source": "probe", "gpu": 2, "reason": "GPU is lost", "backend": "nvml"}
    assert data["metrics"]["headline"]["gpus"] == 8
    assert data["metrics"]["xid_by_code"]["79"] == 2


def test_thermal_fixture_old_xml_yields_n003(cli, tmp_path: Path, empty_log: Path, result_validator) -> None:
    code, data, _ = run_node(cli, tmp_path, "--no-host", "--kernel-log", str(empty_log),
                             "--smi-xml", str(FIXTURES / "thermal_throttle_4x_a100.xml"))
    assert code == 0
    result_validator(data)
    (finding,) = data["findings"]
    assert finding["code"] == "N003" and finding["severity"] == "high"
    assert finding["evidence"]["gpu"] == 3
    assert set(finding["evidence"]["reasons"]) == {"hw_thermal_slowdown", "sw_thermal_slowdown"}
    assert finding["evidence"]["temperature_c"] == 91.0
    assert data["metrics"]["gpu"]["driver_version"] == "525.85.12"


def test_pcie_fixture_yields_n010(cli, tmp_path: Path, empty_log: Path, result_validator) -> None:
    code, data, _ = run_node(cli, tmp_path, "--no-host", "--kernel-log", str(empty_log),
                             "--smi-xml", str(FIXTURES / "pcie_x8_2x_l40s.xml"))
    assert code == 0
    result_validator(data)
    (finding,) = data["findings"]
    assert finding["code"] == "N010" and finding["location"]["file"] == "GPU 1 (00000000:C1:00.0)"
    assert (finding["evidence"]["width_current"], finding["evidence"]["width_max"]) == (8, 16)


@pytest.mark.parametrize("option,name", [("--smi-xml", "healthy_8x_h100.xml"),
                                         ("--nvml-record", "healthy_8x_h100.nvml.json")])
def test_healthy_fixture_has_no_gpu_findings(cli, tmp_path: Path, empty_log: Path, option: str, name: str,
                                             result_validator) -> None:
    code, data, _ = run_node(cli, tmp_path, "--kernel-log", str(empty_log), option, str(FIXTURES / name))
    assert code == 0
    result_validator(data)
    assert not GPU_CODES & {f["code"] for f in data["findings"]}
    assert data["metrics"]["headline"]["gpus"] == 8
    assert data["metrics"]["headline"]["gpu_util_max_pct"] == 97.0
    assert data["errors"] == [] or all(not e["source"].startswith("gpu") for e in data["errors"])


def test_fail_on_exit_code_with_fixture(cli, tmp_path: Path, empty_log: Path) -> None:
    args = ("--no-host", "--kernel-log", str(empty_log), "--smi-xml", str(FIXTURES / "thermal_throttle_4x_a100.xml"))
    assert cli("node", "--no-store", "-q", "--fail-on", "high", *args).exit_code == 1
    assert cli("node", "--no-store", "-q", "--fail-on", "critical", *args).exit_code == 0


def test_stored_run_renders_in_every_format(cli, tmp_path: Path) -> None:
    res = cli("node", "-q", "--no-host", "--smi-xml", str(FIXTURES / "thermal_throttle_4x_a100.xml"),
              "--kernel-log", str(FIXTURES / "xid79_ecc_kern.log"))
    assert res.exit_code == 0
    for fmt in ("terminal", "md", "html", "json"):
        shown = cli("show", "--format", fmt)
        assert shown.exit_code == 0, shown.stderr
        assert "N003" in shown.stdout
        if fmt != "json":
            assert "NVIDIA A100-SXM4-80GB" in shown.stdout and "fallen off the bus" in shown.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--smi-xml", "missing.xml"), "cannot read --smi-xml"),
        (("--nvml-record", "missing.json"), "cannot read --nvml-record"),
        (("--kernel-log", "missing.log", "--gpu-backend", "none"), "cannot read --kernel-log"),
        (("--smi-xml", "not-a-report.txt"), "not an nvidia-smi report"),
        (("--nvml-record", "not-a-record.json"), "cannot use NVML record"),
    ],
)
def test_unusable_inputs_exit_3_before_anything_is_probed_or_stored(cli, tmp_path: Path, isolated_store: Path,
                                                                    args, needle) -> None:
    (tmp_path / "not-a-report.txt").write_text("NVIDIA-SMI has failed because it couldn't communicate with the "
                                               "NVIDIA driver.\n", encoding="utf-8")
    (tmp_path / "not-a-record.json").write_text('{"format": "something else"}', encoding="utf-8")
    named = tuple(str(tmp_path / a) if a.startswith(("missing", "not-a-")) else a for a in args)
    out = tmp_path / "out.json"
    res = cli("node", "--json", str(out), *named)  # the host probe is on: it must not run either
    assert res.exit_code == 3
    assert needle in res.stderr, res.stderr
    assert res.stdout == "" and "Host" not in res.stderr  # no snapshot of this machine printed
    assert not out.exists() and not isolated_store.exists()  # nothing written, nothing stored


def test_truncated_xml_keeps_the_complete_gpus_and_says_so(cli, tmp_path: Path, empty_log: Path,
                                                           result_validator) -> None:
    broken = tmp_path / "broken.xml"
    text = (FIXTURES / "healthy_8x_h100.xml").read_text(encoding="utf-8")
    broken.write_text(text[: len(text) // 2], encoding="utf-8")  # truncated, as when nvidia-smi is killed
    code, data, _ = run_node(cli, tmp_path, "--no-host", "--kernel-log", str(empty_log), "--smi-xml", str(broken))
    assert code == 0
    result_validator(data)
    gpu = data["metrics"]["gpu"]
    assert gpu["available"] is True and 0 < len(gpu["devices"]) < 8
    assert any("partial nvidia-smi XML" in e["message"] and "kept the" in e["message"] for e in data["errors"])
    (missing,) = [f for f in data["findings"] if f["code"] == "N012"]
    assert missing["evidence"]["attached_gpus"] == 8 and missing["evidence"]["listed_gpus"] == len(gpu["devices"])


@pytest.mark.parametrize(
    "args",
    [
        ("--smi-xml", "a.xml", "--nvml-record", "b.json"),
        ("--record", "x.jsonl"),
        ("--watch", "--interval", "0"),
        ("--gpu-backend", "cuda"),
    ],
)
def test_usage_errors_exit_2(cli, args) -> None:
    assert cli("node", "--no-store", *args).exit_code == 2


def test_gpu_backend_nvml_without_library_is_a_note(cli, tmp_path: Path, empty_log: Path) -> None:
    code, data, _ = run_node(cli, tmp_path, "--no-host", "--kernel-log", str(empty_log), "--gpu-backend", "nvml")
    assert code == 0
    if data["metrics"]["gpu"]["available"]:
        pytest.skip("NVML is available on this machine")
    assert data["metrics"]["gpu"]["backend"] == "none"
    assert any("NVML" in e["message"] for e in data["errors"])


def test_save_and_evaluate_an_nvml_record(cli, tmp_path: Path, empty_log: Path) -> None:
    record = tmp_path / "here.nvml.json"
    assert cli("node", "--no-store", "-q", "--no-host", "--kernel-log", str(empty_log),
               "--save-nvml-record", str(record)).exit_code == 0
    assert json.loads(record.read_text())["format"] == "infradoctor.nvml-record/1"
    code, data, _ = run_node(cli, tmp_path, "--no-host", "--kernel-log", str(empty_log), "--nvml-record", str(record))
    assert code == 0 and data["metrics"]["gpu"]["backend"] == "nvml"
    assert data["target"]["nvml_record"] == str(record)


def test_rules_command_explains_node_codes(cli) -> None:
    for code in ("N001", "N003", "N010", "N012"):
        res = cli("rules", code)
        assert res.exit_code == 0
        assert "How it is measured" in res.stdout


def test_result_round_trips(cli, tmp_path: Path) -> None:
    _, data, _ = run_node(cli, tmp_path, "--no-host", "--smi-xml", str(FIXTURES / "pcie_x8_2x_l40s.xml"))
    assert Result.from_dict(data).to_dict()["metrics"] == data["metrics"]


def test_recorded_gpu_evidence_does_not_read_this_machines_kernel_log(cli, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = cli("node", "--no-host", "--nvml-record", str(FIXTURES / "healthy_8x_h100.nvml.json"), "--json", str(out))
    assert res.exit_code == 0, res.stderr
    data = json.loads(out.read_text())
    assert data["metrics"]["kernel_log"]["source"] is None
    assert any("recorded" in e["message"] for e in data["errors"] if e["source"] == "kernel-log")
