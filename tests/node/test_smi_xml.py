"""The nvidia-smi XML backend: both element-name generations, N/A values, broken input, the binary's failures."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from infradoctor.node.gpu.smi_xml import SmiXmlBackend, parse_smi_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
MIB = 1024 * 1024


def test_new_layout_fields() -> None:
    probe = parse_smi_report((FIXTURES / "healthy_8x_h100.xml").read_bytes())
    snap = probe.snapshot
    assert probe.notes == ()
    assert (snap.backend, snap.driver_version, snap.cuda_version, snap.available) == ("smi", "550.90.07", "12.4", True)
    assert len(snap.devices) == 8
    gpu = snap.devices[0]
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.pci_bus_id == "00000000:18:00.0"
    assert gpu.memory_total_bytes == 81559 * MIB and gpu.memory_used_bytes == 72415 * MIB
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert gpu.clock_event_reasons == 0 and gpu.temperature_c == 58.0
    assert gpu.power_draw_w == pytest.approx(611.37) and gpu.power_limit_w == 700.0
    assert (gpu.sm_clock_mhz, gpu.max_sm_clock_mhz) == (1980, 1980)
    assert gpu.ecc.volatile_uncorrected == 0 and gpu.remapped_rows_pending is False
    assert gpu.retired_pages_single_bit is None  # N/A on Hopper
    assert gpu.persistence_mode is True and gpu.mig_enabled is False
    assert [(p.pid, p.name, p.used_memory_bytes) for p in gpu.processes] == [(41210, "/usr/bin/python3", 72404 * MIB)]


def test_old_layout_throttle_reasons_and_power_readings() -> None:
    snap = parse_smi_report((FIXTURES / "thermal_throttle_4x_a100.xml").read_bytes()).snapshot
    hot = snap.devices[3]
    assert hot.clock_event_reasons == 0x40 | 0x20
    assert hot.power_draw_w == pytest.approx(287.12) and hot.power_limit_w == 400.0
    assert snap.devices[0].clock_event_reasons == 0


def test_ecc_sources_are_summed_and_old_single_double_bit_totals_read() -> None:
    xml = """<nvidia_smi_log><attached_gpus>1</attached_gpus><gpu id="00000000:05:00.0">
      <product_name>Tesla V100-SXM2-32GB</product_name>
      <ecc_errors>
        <volatile><single_bit><device_memory>3</device_memory><total>5</total></single_bit>
          <double_bit><device_memory>1</device_memory><total>1</total></double_bit></volatile>
        <aggregate><single_bit><total>40</total></single_bit><double_bit><total>2</total></double_bit></aggregate>
      </ecc_errors>
      <retired_pages>
        <multiple_single_bit_retirement><retired_count>4</retired_count></multiple_single_bit_retirement>
        <double_bit_retirement><retired_count>1</retired_count></double_bit_retirement>
        <pending_blacklist>Yes</pending_blacklist>
      </retired_pages>
      <remapped_rows>N/A</remapped_rows>
    </gpu></nvidia_smi_log>"""
    gpu = parse_smi_report(xml).snapshot.devices[0]
    assert (gpu.ecc.volatile_corrected, gpu.ecc.volatile_uncorrected) == (5, 1)
    assert (gpu.ecc.aggregate_corrected, gpu.ecc.aggregate_uncorrected) == (40, 2)
    assert (gpu.retired_pages_single_bit, gpu.retired_pages_double_bit, gpu.retired_pages_pending) == (4, 1, True)
    assert gpu.remapped_rows_pending is None
    # what the XML did not have is None, and the important gaps are listed
    assert gpu.temperature_c is None and "temperature_c" in gpu.unavailable


def test_sram_parity_and_secded_count_as_uncorrectable() -> None:
    xml = """<nvidia_smi_log><gpu><ecc_errors><volatile>
      <sram_correctable>2</sram_correctable><sram_uncorrectable_parity>1</sram_uncorrectable_parity>
      <sram_uncorrectable_secded>1</sram_uncorrectable_secded><dram_correctable>3</dram_correctable>
      <dram_uncorrectable>N/A</dram_uncorrectable></volatile></ecc_errors></gpu></nvidia_smi_log>"""
    ecc = parse_smi_report(xml).snapshot.devices[0].ecc
    assert (ecc.volatile_corrected, ecc.volatile_uncorrected, ecc.aggregate_corrected) == (5, 2, None)


@pytest.mark.parametrize(
    "text,needle",
    [
        ("", "not an nvidia-smi report"),
        ("<nvidia_smi_log><gpu>", "malformed"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "not an nvidia-smi report"),
        ("<html><body>not it</body></html>", "root element <html>"),
    ],
)
def test_bad_documents_are_not_available_with_a_note(text: str, needle: str) -> None:
    probe = parse_smi_report(text, source="dump.xml")
    assert probe.snapshot.available is False and probe.snapshot.devices == ()
    assert len(probe.notes) == 1 and needle in probe.notes[0].message and "dump.xml" in probe.notes[0].message


def test_attached_gpus_mismatch_is_noted() -> None:
    probe = parse_smi_report("<nvidia_smi_log><attached_gpus>2</attached_gpus><gpu/></nvidia_smi_log>")
    assert "attached_gpus says 2" in probe.notes[0].message
    assert len(probe.snapshot.devices) == 1


def fake_smi(tmp_path: Path, body: str) -> str:
    """An executable standing in for nvidia-smi (there is no NVIDIA driver here)."""
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_backend_runs_the_binary_with_q_x(tmp_path: Path) -> None:
    fixture = FIXTURES / "pcie_x8_2x_l40s.xml"
    binary = fake_smi(tmp_path, f'[ "$1 $2" = "-q -x" ] || exit 64\ncat "{fixture}"')
    snap = SmiXmlBackend(binary=binary).probe().snapshot
    assert snap.available and [d.name for d in snap.devices] == ["NVIDIA L40S", "NVIDIA L40S"]


def test_backend_reports_a_failing_binary(tmp_path: Path) -> None:
    binary = fake_smi(
        tmp_path,
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9",
    )
    probe = SmiXmlBackend(binary=binary).probe()
    assert probe.snapshot.available is False
    assert "exit 9" in probe.notes[0].message and "couldn't communicate" in probe.notes[0].message


def test_backend_without_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    probe = SmiXmlBackend().probe()
    assert not probe.snapshot.available and "not found" in probe.notes[0].message


def test_unreadable_xml_file(tmp_path: Path) -> None:
    probe = SmiXmlBackend(report_file=tmp_path).probe()  # a directory
    assert not probe.snapshot.available and "cannot read" in probe.notes[0].message
    assert os.path.isdir(tmp_path)


def test_auto_falls_back_to_nvidia_smi_when_nvml_cannot_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from infradoctor.node.gpu import select_backend
    from infradoctor.node.gpu.nvml import NvmlBackend

    if NvmlBackend().init() is None:
        pytest.skip("NVML loads here")
    fake_smi(tmp_path, f'cat "{FIXTURES / "healthy_8x_h100.xml"}"')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    backend, notes = select_backend("auto")
    assert backend.name == "smi"
    assert [n.source for n in notes] == ["gpu.nvml", "gpu"] and "falling back" in notes[1].message
    assert len(backend.probe().snapshot.devices) == 8
    forced, _ = select_backend("nvml")
    assert forced.name == "none" and "NVML could not initialise" in forced.probe().notes[0].message
    assert select_backend("none")[0].probe().snapshot.available is False


def test_watch_samples_use_query_gpu_csv_with_old_field_fallback(tmp_path: Path) -> None:
    # Like an R525 driver: clocks_event_reasons is not a known field yet, clocks_throttle_reasons is.
    binary = fake_smi(tmp_path, """case "$1" in
  *clocks_event_reasons*) echo 'Field "clocks_event_reasons.active" is not a valid field to query.'; exit 2;;
  --query-gpu=*) echo "0, 97, 61, 72415, 81559, 58, 611.37, 700.00, 1980, 1980, P0, 0x0000000000000000"
                 echo "1, 100, 54, 61220, 81920, 91, 287.12, 400.00, 1005, 1410, P0, 0x0000000000000060"
                 echo "2, [N/A], [N/A], [N/A], 81920, [N/A], [Not Supported], [N/A], [N/A], [N/A], P99, [N/A]";;
  *) exit 64;;
esac""")
    devices = SmiXmlBackend(binary=binary).sample()
    assert [d.index for d in devices] == [0, 1, 2]
    assert devices[0].memory_used_bytes == 72415 * MIB and devices[0].power_draw_w == pytest.approx(611.37)
    assert devices[1].clock_event_reasons == 0x60 and devices[1].sm_clock_mhz == 1005
    assert devices[1].max_sm_clock_mhz == 1410 and devices[1].performance_state == 0
    assert devices[2].performance_state is None  # P99 is not a P-state
    assert devices[2].utilization_gpu_pct is None and devices[2].memory_total_bytes == 81920 * MIB
    assert devices[2].clock_event_reasons is None
