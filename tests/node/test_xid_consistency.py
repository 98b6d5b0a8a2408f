"""``node`` and ``logs`` read the same Xid kernel line the same way: one table (``infradoctor.xid``) for both."""

from __future__ import annotations

from pathlib import Path

import pytest

from infradoctor.logs.evidence import LogsEvidence, build_evidence
from infradoctor.logs.formats import ParseOptions, choose_format
from infradoctor.logs.incidents import LogsRuleOptions as RuleOptions
from infradoctor.logs.source import open_source, read_sample
from infradoctor.logs.stats import LogStats
from infradoctor.node.kernel import read_kernel_log
from infradoctor.node.rules import NodeOptions
from infradoctor.node.rules import n001_gpu_xid as node_n001
from infradoctor.node.rules.n001_gpu_xid import check_logs as logs_n001_check
from infradoctor.xid import ACTIONS, XID_CATALOG, parse_xid_line, xid_info

from .builders import evidence

CODES = (*sorted(XID_CATALOG), 9999)
"""Every code in the table and one the table does not know."""


def kernel_line(code: int) -> str:
    return f"[ {code}.5] NVRM: Xid (PCI:0000:3B:00): {code}, pid=4242, name=python3, something happened"


def logs_evidence(path: Path) -> LogsEvidence:
    """The logs command's pipeline on one file: sniff, parse, then the Xid counts as evidence."""
    source = open_source(path)
    chosen, _ = choose_format("auto", read_sample(source), year=2026)
    stats = LogStats()
    chosen.parse(source, stats, ParseOptions(engine="python", polars_min_bytes=0))
    assert chosen.name == "kernel"
    return build_evidence(stats, (str(path),))


def test_node_and_logs_agree_on_every_code(tmp_path: Path) -> None:
    path = tmp_path / "kern.log"
    path.write_text("".join(kernel_line(code) + "\n" for code in CODES))
    node_found = {f.evidence["xid"]: f for f in node_n001.check(evidence(kernel=read_kernel_log(path)), NodeOptions())}
    logs_found = {f.evidence["xid"]: f for f in logs_n001_check(logs_evidence(path), RuleOptions())}
    assert set(node_found) == set(logs_found) == set(CODES)
    for code in CODES:
        node, logs, info = node_found[code], logs_found[code], xid_info(code)
        for key in ("meaning", "origin", "action"):
            assert node.evidence[key] == logs.evidence[key] == getattr(info, key), (code, key)
        assert node.severity is logs.severity is info.severity, code
        assert node.fix == logs.fix == info.advice, code
        assert logs.evidence["devices"] == ["PCI:0000:3b:00"] and node.evidence["pci"] == ["0000:3b:00"]


@pytest.mark.parametrize("code", [38, 121, 143, 154])
def test_codes_logs_did_not_know_before(code: int) -> None:
    assert xid_info(code).meaning != f"Xid {code} (not in infradoctor's table)"


def test_table_follows_the_reference_actions() -> None:
    """Routing reference G1: 13/31/43/45/68 application; 48, 62/64/95/109/119/120/140 reset; 79 reboot."""
    for code in (13, 31, 43, 68):
        assert XID_CATALOG[code].action == "restart app", code
    for code in (48, 62, 64, 95, 109, 119, 120, 140):
        assert XID_CATALOG[code].action == "reset GPU", code
    assert XID_CATALOG[79].action == "reboot" and XID_CATALOG[45].action == "none"
    assert all(info.action in ACTIONS and info.advice and info.meaning for info in XID_CATALOG.values())
    assert XID_CATALOG[13].hardware is False and XID_CATALOG[48].hardware is True


def test_parse_xid_strips_the_pci_prefix_and_reads_the_message() -> None:
    parsed = parse_xid_line("Nov 24 03:11:05 node kernel: NVRM: Xid (PCI:0000:AB:00): 94, pid=41215, name=python3, Contained")
    assert parsed is not None
    assert (parsed.code, parsed.pci, parsed.pid, parsed.process_name, parsed.timestamp) == (
        94, "0000:ab:00", 41215, "python3", "Nov 24 03:11:05")
    assert parse_xid_line("NVRM: GPU 0000:3a:00.0: GPU has fallen off the bus.") is None
