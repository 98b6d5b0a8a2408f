"""Xid lines from the kernel log: formats, the code table, bounds and unreadable sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from infradoctor.node import kernel
from infradoctor.node.kernel import (
    XID_CATALOG,
    normalise_pci,
    parse_xid_line,
    read_kernel_log,
    scan_lines,
    xid_info,
)
from infradoctor.xid import ACTIONS

REFERENCE_CODES = (13, 31, 43, 45, 48, 62, 63, 64, 68, 74, 79, 92, 94, 95, 109, 119, 120, 140)


@pytest.mark.parametrize(
    "line,code,pci,pid,name,stamp",
    [
        ("[1209694.118236] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
         79, "0000:3b:00", None, None, "1209694.118236"),
        ("Nov 24 03:11:05 node kernel: [1209287.64] NVRM: Xid (PCI:0000:AB:00): 94, pid=41215, name=python3, "
         "Contained: CE User Channel (0x9). RST: No, D-RST: No", 94, "0000:ab:00", 41215, "python3", "Nov 24 03:11:05"),
        ("2026-11-24T03:02:41+0000 node kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=40012, name=python3, "
         "Graphics SM Warp Exception", 13, "0000:18:00", 40012, "python3", "2026-11-24T03:02:41+0000"),
        ("NVRM: Xid (PCI:0000:18:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU",
         48, "0000:18:00", None, None, None),
        ("[  33.1] NVRM: Xid (0000:65:00): 31, Ch 00000010, engmask 00000101, intr 10000000", 31, "0000:65:00",
         None, None, "33.1"),
    ],
)
def test_parse_xid_line_formats(line, code, pci, pid, name, stamp) -> None:
    event = parse_xid_line(line, 7)
    assert event is not None
    assert (event.code, event.pci, event.pid, event.process_name, event.timestamp, event.line) == (
        code, pci, pid, name, stamp, 7)


@pytest.mark.parametrize("line", ["NVRM: GPU 0000:3a:00.0: GPU has fallen off the bus.", "Xid", "random text", ""])
def test_non_xid_lines(line: str) -> None:
    assert parse_xid_line(line, 1) is None


def test_catalog_covers_the_reference_codes_with_actions() -> None:
    for code in REFERENCE_CODES:
        info = XID_CATALOG[code]
        assert info.action in ACTIONS, code
        assert info.origin and info.meaning and info.advice
    assert XID_CATALOG[79].action == "reboot" and XID_CATALOG[13].origin == "application"
    assert XID_CATALOG[48].origin == "hardware"
    unknown = xid_info(9999)
    assert unknown.code == 9999 and unknown.action == "reset GPU"


def test_scan_is_bounded_but_counts_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel, "MAX_EVENTS", 10)
    lines = [f"[{i}.0] NVRM: Xid (PCI:0000:3b:00): 13, pid={i}, name=x, y" for i in range(25)] + ["other"]
    evidence = scan_lines(lines, source="t")
    assert evidence.xid_events_total == 25 and len(evidence.xid_events) == 10
    assert evidence.xid_events[0].pid == 15 and evidence.lines_read == 26


def test_read_named_file(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"\xff\xfe garbage\n[1.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    evidence = read_kernel_log(log)
    assert evidence.source == str(log) and [e.code for e in evidence.xid_events] == [79]


@pytest.mark.parametrize("make", [lambda p: p / "missing.log", lambda p: p])
def test_unreadable_named_file_is_not_available(tmp_path: Path, make) -> None:
    path = make(tmp_path)
    evidence = read_kernel_log(path)
    assert evidence.source is None and evidence.xid_events == ()
    assert len(evidence.tried) == 1 and str(path) in evidence.tried[0]


def test_live_sources_never_raise() -> None:
    evidence = read_kernel_log()
    assert evidence.source is not None or evidence.tried


def test_no_source_readable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no dmesg, no journalctl
    monkeypatch.setattr(kernel, "KERN_LOG_PATHS", (str(tmp_path / "kern.log"),))
    evidence = read_kernel_log()
    assert evidence.source is None
    assert [t.split(":")[0] for t in evidence.tried] == ["dmesg", "journalctl -k", str(tmp_path / "kern.log")]


@pytest.mark.parametrize(
    "address,expected",
    [("00000000:3B:00.0", "0000:3b:00"), ("0000:3b:00", "0000:3b:00"), ("3b:00.0", "0000:3b:00"), (None, None)],
)
def test_normalise_pci(address, expected) -> None:
    assert normalise_pci(address) == expected


def test_node_reads_what_logs_reads_bare_lines_and_a_bus_drop_without_xid(tmp_path: Path) -> None:
    """One reader for both commands: bare Xid lines, any prefix, and "fallen off the bus" without an Xid."""
    log = tmp_path / "kern.log"
    log.write_text(
        "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No\n"
        "kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>', x\n"
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
        "               NVRM: fallen off the bus and is not responding to commands.\n"
        "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1, name=python3, Ch 00000001 caused by previous Xid 149\n"
        "[ 9482.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=2314, name=python, GPU has fallen off the bus.\n"
        "[ 9482.2] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
    )
    events = read_kernel_log(log).xid_events
    assert [(e.code, e.pci) for e in events] == [(95, "0000:01:00"), (13, "0000:38:00"), (79, "0000:b3:00"),
                                                 (45, "0000:dc:00"), (79, "0000:3b:00")]
    assert events[2].without_xid and events[3].caused_by == 149


def test_a_huge_address_is_read_in_linear_time() -> None:
    import time

    line = "NVRM: Xid (PCI:" + "0" * 30_000 + "): 79, pid=1, GPU has fallen off the bus."
    start = time.perf_counter()
    event = parse_xid_line(line, 1)
    assert normalise_pci("0" * 30_000 + ":3b:00") is not None
    assert time.perf_counter() - start < 1.0  # 27 s before (a backtracking search)
    assert event is not None and event.code == 79 and event.pci == "unknown"  # no address is 30,000 characters
