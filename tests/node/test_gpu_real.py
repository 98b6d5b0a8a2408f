"""On a real NVIDIA GPU: NVML and nvidia-smi XML agree, records replay exactly, the CLI sees the GPUs.

Run with ``pytest -m gpu`` on a machine with a GPU; excluded by default.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from infradoctor.node.gpu.nvml import NvmlBackend, record_live_nvml, replay_backend
from infradoctor.node.gpu.smi_xml import SmiXmlBackend
from infradoctor.node.watch import NodeSampler

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml_probe():
    backend = NvmlBackend()
    reason = backend.init()
    if reason is not None:
        pytest.skip(f"no NVML here: {reason}")
    try:
        yield backend.probe()
    finally:
        backend.close()


@pytest.fixture(scope="module")
def smi_probe():
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not on PATH")
    return SmiXmlBackend().probe()


def test_nvml_sees_gpus(nvml_probe) -> None:
    snap = nvml_probe.snapshot
    assert snap.available and snap.devices and snap.driver_version
    for device in snap.devices:
        assert device.name and device.uuid and device.pci_bus_id
        assert device.memory_total_bytes and device.memory_total_bytes > 1024**3
        assert device.pcie_width_max and device.pcie_gen_max


def test_nvml_and_smi_xml_agree(nvml_probe, smi_probe) -> None:
    nvml, smi = nvml_probe.snapshot, smi_probe.snapshot
    assert smi.available, smi_probe.notes
    assert smi.driver_version == nvml.driver_version
    assert len(smi.devices) == len(nvml.devices)
    for a, b in zip(nvml.devices, smi.devices, strict=True):
        assert a.name == b.name
        assert a.uuid == b.uuid
        assert (a.pci_bus_id or "").upper() == (b.pci_bus_id or "").upper()
        assert a.memory_total_bytes is not None and b.memory_total_bytes is not None
        assert abs(a.memory_total_bytes - b.memory_total_bytes) <= 0.02 * a.memory_total_bytes
        assert a.pcie_width_max == b.pcie_width_max
        assert a.pcie_gen_max == b.pcie_gen_max
        assert a.max_sm_clock_mhz == b.max_sm_clock_mhz
        assert a.persistence_mode == b.persistence_mode
        assert a.mig_enabled == b.mig_enabled or (a.mig_enabled is None and b.mig_enabled is None)
        assert a.ecc_enabled == b.ecc_enabled
        if a.power_limit_w is not None and b.power_limit_w is not None:
            assert abs(a.power_limit_w - b.power_limit_w) <= 1.0
        assert a.remapped_rows_pending == b.remapped_rows_pending
        assert a.ecc.aggregate_uncorrected == b.ecc.aggregate_uncorrected


def test_nvml_reads_the_judgement_fields(nvml_probe) -> None:
    """What N003/N005/N010 judge on: P-state, reason counters, link generations, virtualization, processes' kind."""
    for device in nvml_probe.snapshot.devices:
        assert device.performance_state is not None and 0 <= device.performance_state <= 15
        assert device.virtualization_mode in ("none", "pass-through", "vgpu", "host-vgpu", "host-vsga")
        assert device.pcie_gen_max_device is not None and device.pcie_gen_max_device >= (device.pcie_gen_max or 0)
        assert device.clock_event_time_s.get("sw_power_cap", 0.0) >= 0.0
        assert all(p.kind in ("compute", "graphics", "compute+graphics") for p in device.processes)
        assert not any(reason == "malformed value in the NVML answer" for reason in device.unavailable.values())
        if device.mig_enabled:
            assert device.mig_devices, "MIG on but no MIG device read"
            for mig in device.mig_devices:
                assert mig.memory_total_bytes and mig.memory_total_bytes < (device.memory_total_bytes or 0)
                assert mig.gpu_instance_id is not None


def test_smi_text_xml_and_nvml_agree(nvml_probe, smi_probe) -> None:
    """The `nvidia-smi -q` text reader gives what the XML reader and NVML give, on this machine's GPUs."""
    import subprocess

    from infradoctor.node.gpu.smi_xml import parse_smi_report

    text = subprocess.run(["nvidia-smi", "-q"], capture_output=True, check=True, timeout=60).stdout
    from_text = parse_smi_report(text, source="nvidia-smi -q").snapshot
    assert from_text.available and len(from_text.devices) == len(smi_probe.snapshot.devices)
    for t, x, n in zip(from_text.devices, smi_probe.snapshot.devices, nvml_probe.snapshot.devices, strict=True):
        for field in ("name", "uuid", "memory_total_bytes", "max_sm_clock_mhz", "pcie_gen_max", "pcie_width_max",
                      "persistence_mode", "mig_enabled", "ecc_enabled", "remapped_rows_pending",
                      "virtualization_mode", "pcie_gen_max_device"):
            assert getattr(t, field) == getattr(x, field), ("text vs xml", field)
        assert (t.pci_bus_id or "").upper() == (n.pci_bus_id or "").upper()
        assert [m.gpu_instance_id for m in t.mig_devices] == [m.gpu_instance_id for m in x.mig_devices]
        assert t.clock_event_time_s.keys() == x.clock_event_time_s.keys()


def test_watch_gives_each_gpu_a_window(nvml_probe) -> None:
    from infradoctor.node import NodeRequest, run
    from infradoctor.node.metrics import NodeMetrics

    result = run(NodeRequest(host=False, watch=True, interval_s=0.5, duration_s=3.0))
    metrics = NodeMetrics.from_dict(result.metrics)
    assert metrics.watch is not None and metrics.watch.samples >= 5
    for device in metrics.gpu.devices:
        window = device.window
        assert window is not None and window.seconds >= 2.0
        assert window.pcie_replays is not None and window.pcie_replays >= 0
        assert window.utilization_gpu_mean_pct is not None or device.mig_enabled


def test_record_replays_to_the_same_evidence(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    live = record_live_nvml(path)
    if not live.snapshot.available:
        pytest.skip("NVML not available")
    replayed = replay_backend(path).probe()
    assert replayed.snapshot.devices == live.snapshot.devices
    assert json.loads(path.read_text())["system"]["nvmlDeviceGetCount"] == len(live.snapshot.devices)


def test_sampler_reads_every_gpu(nvml_probe) -> None:
    backend = NvmlBackend()
    try:
        values = NodeSampler(backend)()
    finally:
        backend.close()
    for device in nvml_probe.snapshot.devices:
        assert values[f"gpu{device.index}_util_pct"] is not None
        assert values[f"gpu{device.index}_mem_used_pct"] is not None


def test_cli_on_this_gpu_machine(cli, tmp_path: Path, nvml_probe, result_validator) -> None:
    out = tmp_path / "out.json"
    res = cli("node", "--json", str(out))
    assert res.exit_code == 0, res.stderr
    data = json.loads(out.read_text())
    result_validator(data)
    assert data["metrics"]["gpu"]["backend"] == "nvml"
    assert data["metrics"]["headline"]["gpus"] == len(nvml_probe.snapshot.devices)
    assert "N012" not in {f["code"] for f in data["findings"]}


def test_smi_watch_sample_matches_the_xml(smi_probe) -> None:
    sample = SmiXmlBackend().sample()
    assert len(sample) == len(smi_probe.snapshot.devices)
    for quick, full in zip(sample, smi_probe.snapshot.devices, strict=True):
        assert quick.index == full.index
        assert quick.memory_total_bytes == full.memory_total_bytes
        assert quick.utilization_gpu_pct is not None and quick.clock_event_reasons is not None
