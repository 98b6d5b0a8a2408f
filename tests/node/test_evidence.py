"""Evidence round trips (to_dict / from_dict / stored metrics) and the human sections built from metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from infradoctor.findings import run_rules as evaluate
from infradoctor.metrics import MetricsError
from infradoctor.node.evidence import EccCounts, GpuDevice, GpuProcess, GpuWindow, HostEvidence, MigDevice
from infradoctor.node.gpu.smi_xml import SmiXmlBackend
from infradoctor.node.kernel import read_kernel_log
from infradoctor.node.metrics import NodeMetrics, evidence_from_metrics
from infradoctor.node.snapshot import NodeRequest, build_result, collect_evidence
from infradoctor.report import render
from infradoctor.report.present.node import sections
from infradoctor.result import Result

from .builders import evidence, gpu, host

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"


def test_dataclasses_round_trip() -> None:
    device = gpu(2, ecc=EccCounts(1, None, 3, 0), unavailable={"power_draw": "Not Supported"},
                 processes=(GpuProcess(7, "python", None, "compute+graphics", 3, 0),),
                 mig_devices=(MigDevice(0, 3, 0, 10, 20, 14),), clock_event_time_s={"sw_power_cap": 1.5},
                 window=GpuWindow(60.0, 60, 50.0, 90.0, 0.5, {"sw_power_cap": 0.25}, 12))
    assert GpuDevice.from_dict(device.to_dict()) == device
    assert HostEvidence.from_dict(host().to_dict()) == host()


def test_from_dict_rejects_wrong_types() -> None:
    data = gpu(0).to_dict()
    data["index"] = "zero"
    with pytest.raises(MetricsError, match="index"):
        GpuDevice.from_dict(data)


def test_metrics_are_typed_and_validate(result_validator) -> None:
    snapshot = SmiXmlBackend(report_file=FIXTURES / "pcie_x8_2x_l40s.xml").probe().snapshot
    result = build_result(NodeRequest(host=False), evidence(*snapshot.devices, gpu=snapshot, host=None),
                          started_at="2026-11-29T10:00:00Z", duration_s=0.1)
    result_validator(result)
    metrics = NodeMetrics.from_dict(result.metrics)
    assert metrics.gpu == snapshot and metrics.host is None
    assert metrics.headline.gpus == 2 and "cpu_util_pct" not in result.metrics["headline"]


def test_stored_metrics_rebuild_the_same_evidence_and_findings() -> None:
    request = NodeRequest(smi_xml=FIXTURES / "thermal_throttle_4x_a100.xml",
                          kernel_log=FIXTURES / "xid79_ecc_kern.log")
    ev = collect_evidence(request, sleep=lambda _: None)
    result = build_result(request, ev, started_at="2026-11-29T10:00:00Z", duration_s=1.0)
    stored = Result.from_json(result.to_json())
    rebuilt = evidence_from_metrics(stored.metrics)
    assert rebuilt.gpu == ev.gpu and rebuilt.kernel == ev.kernel and rebuilt.host == ev.host
    assert evaluate(rebuilt) == evaluate(ev)


def test_sections_and_every_renderer_show_node_results() -> None:
    probe = SmiXmlBackend(report_file=FIXTURES / "pcie_x8_2x_l40s.xml").probe()
    ev = evidence(*probe.snapshot.devices, gpu=probe.snapshot, kernel=read_kernel_log(FIXTURES / "xid79_ecc_kern.log"))
    result = build_result(NodeRequest(), ev, started_at="2026-11-29T10:00:00Z", duration_s=0.4)
    titles = [s.title for s in sections(result)]
    assert titles == ["GPUs", "Kernel log", "Host"]
    for fmt in ("terminal", "md", "html"):
        text = render(result, fmt)
        assert "NVIDIA L40S" in text and "x8/16" in text and "fallen off the bus" in text, fmt
        assert "N010" in text and "N001" in text


def test_sections_survive_a_result_without_gpus_or_host() -> None:
    ev = evidence(host=None)
    result = build_result(NodeRequest(host=False), ev, started_at="2026-11-29T10:00:00Z", duration_s=0.1)
    assert [s.title for s in sections(result)] == ["GPUs", "Kernel log"]
    assert "no GPU visible" in render(result, "md")


def test_hostile_names_from_the_machine_are_escaped_in_html() -> None:
    from infradoctor.node.gpu.smi_xml import parse_smi_report

    hostile = "<script>alert(1)</script>"
    xml = (
        "<nvidia_smi_log><gpu id='00000000:01:00.0'><product_name>&lt;img src=x onerror=alert(1)&gt;</product_name>"
        "<fb_memory_usage><total>100 MiB</total><used>99 MiB</used></fb_memory_usage><processes>"
        f"<process_info><pid>1</pid><type>C</type><process_name>{hostile.replace('<', '&lt;')}</process_name>"
        "<used_memory>50 MiB</used_memory></process_info><process_info><pid>2</pid><type>C</type>"
        "<process_name>b</process_name><used_memory>49 MiB</used_memory></process_info></processes></gpu>"
        "</nvidia_smi_log>"
    )
    snapshot = parse_smi_report(xml).snapshot
    result = build_result(NodeRequest(host=False), evidence(*snapshot.devices, gpu=snapshot, host=None),
                          started_at="2026-11-29T10:00:00Z", duration_s=0.1)
    assert {f.code for f in result.findings} == {"N004", "N005"}
    html = render(result, "html")
    assert hostile not in html and "<img src=x" not in html
    assert "&lt;script&gt;" in html
