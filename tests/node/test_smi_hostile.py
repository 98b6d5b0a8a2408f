"""nvidia-smi reports written by someone hostile or broken: refused or bounded, in time and memory, never a crash.

Each case of issue 17 is here: entity expansion (a 2 MB entity referenced 90 times took 42 s and 568 MB; billion
laughs; external entities), 50,000 ``<gpu>`` elements (37 s, 333 MB), a 100 KB ``<gpu id>`` (past 100 s through
N001's PCI matching), a 400-digit number (OverflowError), ``1.2.3 MiB`` (ValueError). Time bounds here are loose
(a crash or a blow-up is seconds to minutes, the bound is one second or two); the speed goals are measured in
benchmarks/bench_node_fuzz.py.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infradoctor.findings import run_rules
from infradoctor.node.evidence import GpuExpectation, KernelLogEvidence, NodeEvidence
from infradoctor.node.gpu.smi_tree import MAX_DOCUMENT_BYTES, MAX_GPUS, read_prolog
from infradoctor.node.gpu.smi_xml import GpuProbe, parse_smi_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"
MB = 1024 * 1024

ONE_GPU = """<gpu id="00000000:3B:00.0"><product_name>NVIDIA H100</product_name>
<fb_memory_usage><total>81559 MiB</total><used>{used}</used></fb_memory_usage>
<pci><pci_bus_id>00000000:3B:00.0</pci_bus_id><replay_counter>{replays}</replay_counter></pci></gpu>"""


def doc(body: str, prolog: str = "") -> str:
    return f'<?xml version="1.0" ?>\n{prolog}<nvidia_smi_log><attached_gpus>1</attached_gpus>{body}</nvidia_smi_log>'


def timed(function: Callable[[], Any]) -> tuple[Any, float]:
    """(result, seconds)."""
    start = time.perf_counter()
    value = function()
    return value, time.perf_counter() - start


def peak_bytes(function: Callable[[], Any]) -> int:
    """Peak traced memory of a call (run apart from the timing: tracing slows it tenfold)."""
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def evaluate(probe: GpuProbe) -> list[Any]:
    """Every node rule over the probe: hostile values must not hurt the rules either (N001 matches PCI ids)."""
    evidence = NodeEvidence(host=None, gpu=probe.snapshot, kernel=KernelLogEvidence("k", 0, ()),
                            expectation=GpuExpectation(None, (), False, None))
    return run_rules(evidence)


def test_nvidia_smis_own_doctype_is_accepted() -> None:
    probe = parse_smi_report((FIXTURES / "healthy_8x_h100.xml").read_bytes())
    assert probe.snapshot.available and len(probe.snapshot.devices) == 8 and probe.notes == ()


@pytest.mark.parametrize(
    "prolog,reference",
    [
        # one 2 MB entity referenced 90 times: 180 MB once expanded
        ('<!DOCTYPE nvidia_smi_log [<!ENTITY big "' + "x" * (2 * MB) + '">]>\n', "&big;" * 90),
        # billion laughs
        ('<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaaaaaaaa">' + "".join(
            f'<!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">' for i in range(9)) + "]>\n", "&j;"),
        # external entities: a file and a URL
        ('<!DOCTYPE nvidia_smi_log [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n', "&xxe;"),
        ('<!DOCTYPE nvidia_smi_log [<!ENTITY % remote SYSTEM "http://127.0.0.1:9/x.dtd"> %remote;]>\n', ""),
        # an internal subset without entities is refused too: nvidia-smi never writes one
        ('<!DOCTYPE nvidia_smi_log [<!ELEMENT nvidia_smi_log ANY>]>\n', ""),
    ],
)
def test_dtd_subsets_and_entities_are_refused_before_the_body(prolog: str, reference: str) -> None:
    data = doc(ONE_GPU.format(used=reference or "1 MiB", replays=0), prolog)
    probe, seconds = timed(lambda: parse_smi_report(data, source="evil.xml"))
    assert probe.snapshot.available is False and probe.snapshot.devices == ()
    assert "refused" in probe.notes[0].message and "evil.xml" in probe.notes[0].message
    assert seconds < 2.0
    assert peak_bytes(lambda: parse_smi_report(data)) < 3 * len(data) + 100 * MB
    assert read_prolog(data)[0] is not None


def test_fifty_thousand_gpus_are_bounded() -> None:
    data = doc(ONE_GPU.format(used="1 MiB", replays=0) * 50_000)
    probe, seconds = timed(lambda: parse_smi_report(data))
    assert len(probe.snapshot.devices) == MAX_GPUS
    assert any("kept the first" in n.message for n in probe.notes)
    assert seconds < 5.0  # was 37 s with the rules
    assert peak_bytes(lambda: parse_smi_report(data)) < 3 * len(data) + 100 * MB
    findings, rule_seconds = timed(lambda: evaluate(probe))
    assert rule_seconds < 5.0 and {f.code for f in findings} <= {"N012"}


def test_a_huge_gpu_id_is_not_a_pci_id_and_costs_nothing() -> None:
    data = doc(f'<gpu id="{"A:" * 50_000}"><product_name>x</product_name></gpu>')
    probe, seconds = timed(lambda: parse_smi_report(data))
    (device,) = probe.snapshot.devices
    assert device.pci_bus_id is None and device.unavailable["pci_bus_id"] == "not a PCI bus id in the report"
    _, rule_seconds = timed(lambda: evaluate(probe))
    assert seconds < 1.0 and rule_seconds < 1.0


@pytest.mark.parametrize("used", ["9" * 400, "1.2.3 MiB", "1e999 MiB", "-5 MiB", "NaN MiB", "0x10 MiB", "12 PiB"])
def test_numbers_that_are_not_readings_are_not_available(used: str) -> None:
    probe = parse_smi_report(doc(ONE_GPU.format(used=used, replays="9" * 400)))
    (device,) = probe.snapshot.devices
    assert device.memory_used_bytes is None and device.pcie_replay_count is None
    assert device.memory_total_bytes == 81559 * MB


def test_deep_nesting_and_many_elements_are_capped() -> None:
    deep = doc("<gpu>" + "<a>" * 100_000 + "</a>" * 100_000 + "</gpu>")
    probe, seconds = timed(lambda: parse_smi_report(deep))
    assert not probe.snapshot.available and "more than" in probe.notes[0].message
    wide = doc(ONE_GPU.format(used="1 MiB", replays=0) + "<x/>" * 200_000)
    probe, wide_seconds = timed(lambda: parse_smi_report(wide))
    assert len(probe.snapshot.devices) == 1 and any("tags" in n.message for n in probe.notes)
    assert seconds < 5.0 and wide_seconds < 5.0


def test_an_oversized_report_is_read_up_to_the_cap(tmp_path: Path) -> None:
    from infradoctor.node.gpu.smi_xml import SmiXmlBackend

    path = tmp_path / "big.xml"
    padding = "<pad>" + "p" * 1000 + "</pad>"
    path.write_text(doc(ONE_GPU.format(used="1 MiB", replays=0) + padding * (MAX_DOCUMENT_BYTES // 1000 + 100)))
    probe = SmiXmlBackend(report_file=path).probe()
    assert len(probe.snapshot.devices) == 1
    assert any(f"read the first {MAX_DOCUMENT_BYTES}" in n.message for n in probe.notes)


def test_a_long_text_line_and_a_deep_text_indent_are_bounded() -> None:
    lines = ["==============NVSMI LOG==============", "Attached GPUs : 1", "GPU 00000000:3B:00.0",
             "    Product Name : " + "N" * 1_000_000]
    lines += [" " * (4 + i) + f"Level {i} : {i}" for i in range(5000)]
    probe, seconds = timed(lambda: parse_smi_report("\n".join(lines)))
    (device,) = probe.snapshot.devices
    assert device.name is not None and len(device.name) <= 512
    assert seconds < 2.0
