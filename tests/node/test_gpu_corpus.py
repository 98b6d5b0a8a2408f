"""The real-world GPU corpus (tests/corpus/gpu) as regression data: every expected finding, no forbidden one.

31 `nvidia-smi -q -x` documents and 30 `nvidia-smi -q` text documents from public exporters' test data, each with its
expected results in expected.json (see SOURCES.md and BASELINE.md there). The judgement is the one
scripts/corpus_gpu.py prints numbers with.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from infradoctor.findings import run_rules
from infradoctor.node.evidence import GpuExpectation, KernelLogEvidence, NodeEvidence
from infradoctor.node.gpu.smi_xml import parse_smi_report

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "gpu"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("corpus_gpu", ROOT / "scripts" / "corpus_gpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("corpus_gpu", module)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()
EXPECTED = SCRIPT.load_expected()
NO_EXPECTATION = GpuExpectation(cuda_visible_devices=None, device_nodes=(), driver_loaded=False,
                                driver_version_file=None)


def evaluate(name: str) -> tuple[NodeEvidence, list[dict[str, Any]]]:
    probe = parse_smi_report((CORPUS / name).read_bytes(), source=name)
    evidence = NodeEvidence(host=None, gpu=probe.snapshot, kernel=KernelLogEvidence(None, 0, ()),
                            expectation=NO_EXPECTATION, notes=probe.notes)
    findings = [f.to_dict() for f in run_rules(evidence)]
    return evidence, findings


def test_the_corpus_is_complete() -> None:
    formats = [entry["format"] for entry in EXPECTED.values()]
    assert formats.count("xml") == 31 and len(formats) - formats.count("xml") == 30
    assert all((CORPUS / name).is_file() for name in EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_document_meets_its_expectations(name: str) -> None:
    entry = EXPECTED[name]
    evidence, findings = evaluate(name)
    verdicts = SCRIPT.judge(entry, findings)
    assert not verdicts.missed, f"required findings missing: {verdicts.missed}"
    assert not verdicts.false, f"forbidden findings: {verdicts.false}"
    assert not verdicts.false_severity, f"findings above severity_at_most: {verdicts.false_severity}"
    if name.startswith("iluvatar"):  # not an nvidia-smi document: said so, nothing judged
        assert not evidence.gpu.available and "not an nvidia-smi report" in evidence.gpu.source
        return
    assert evidence.gpu.available
    listed = len(evidence.gpu.devices)
    assert listed == entry["gpus"] or any("attached_gpus" in n.message for n in evidence.notes)


def test_text_and_xml_read_the_same_fields() -> None:
    """The -q text reader fills what the XML reader does: on the text corpus, the fields every GPU report has."""
    for name, entry in EXPECTED.items():
        if entry["format"] == "xml" or "truncated" in name:
            continue
        for device in evaluate(name)[0].gpu.devices:
            missing = [f for f in ("name", "uuid", "pci_bus_id", "memory_total_bytes", "temperature_c",
                                   "power_draw_w", "max_sm_clock_mhz", "clock_event_reasons", "pcie_gen_max",
                                   "pcie_width_max", "pcie_replay_count", "performance_state", "power_limit_w")
                       if getattr(device, f) is None]
            assert not missing, (name, device.index, missing)
