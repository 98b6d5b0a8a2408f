"""Hostile GPU inputs, made from real ones: mutated nvidia-smi XML and text reports and NVML records.

Each mutator takes a seeded :class:`random.Random` and a real input (the GPU corpus, the recorded NVML fixtures) and
returns a mutated copy: cut short, values replaced by hostile ones (huge numbers, wrong types, long strings,
markup), elements or lines duplicated, moved or deleted, junk inserted, entities declared. The same mutators drive
the hypothesis suite (tests/node/test_fuzz.py, a few hundred cases) and the long run in benchmarks/bench_node_fuzz.py
(100,000 cases per parser). :func:`evaluate` runs one case end to end: parse, every node rule, the result's JSON.
"""

from __future__ import annotations

import copy
import json
import random
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "gpu"
FIXTURES = ROOT / "tests" / "fixtures" / "node"

HOSTILE_TEXT = [
    "9" * 400, "-" + "9" * 400, "1.2.3 MiB", "1e999", "-1e999", "nan", "inf", "-0", "0x7fffffffffffffff", "", " ",
    "N/A", "[N/A]", "Unknown Error", "Not Supported", "P99", "P-1", "Active", "Not Active", "Yes", "C+G", "M+C", "X",
    "\u202e\u0000bidi", "<script>alert(1)</script>", "&amp;&lt;", "A:" * 5000, "x" * 100_000, "12 PiB", "-5 MiB",
    "4294967295", "18446744073709551616", "1" * 64, "0" * 65, "3.0e+308 W", "16x16x", "GPU 0000:3B:00.0",
]
HOSTILE_JSON: list[Any] = [
    None, True, False, 0, -1, 2**64, 2**70, -(2**70), 1e308, -1e308, 3.5, "", "12", "9" * 400, "nan", [], [None],
    [1, 2], [[[]]], {}, {"gpu": "97"}, {"gpu": 2**70, "memory": -3}, {"used": "x", "total": None},
    {"nvml_error": "NVML_ERROR_GPU_IS_LOST"}, {"nvml_error": "not an error"}, {"nvml_error": 5},
    {"nvml_error": "__class__"}, {"pid": "1"}, [{"pid": None}], [{"pid": 2**40, "usedGpuMemory": "lots"}],
    [{"pid": 1, "usedGpuMemory": -5, "gpuInstanceId": "a"}], {"violationTime": "long"}, {"mig_device": "x"},
    {"busId": 12345}, "x" * 10_000,
]


def corpus_documents(kind: str) -> list[bytes]:
    """The real reports of one kind: ``xml`` (the corpus's XML and the recorded fixtures) or ``text``."""
    if kind == "xml":
        paths = sorted(CORPUS.glob("*.xml")) + sorted(FIXTURES.glob("*.xml"))
    else:
        paths = sorted((CORPUS / "text").glob("*.txt"))
    return [p.read_bytes() for p in paths]


def nvml_records() -> list[dict[str, Any]]:
    """The recorded NVML fixtures."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(FIXTURES.glob("*.nvml.json"))]


_XML_VALUE = re.compile(rb">([^<>]{0,200})<")
_XML_ELEMENT = re.compile(rb"<(gpu|process_info|mig_device|pci|clocks_event_reasons|fb_memory_usage)[ >].*?</\1>",
                          re.S)


def mutate_xml(rng: random.Random, document: bytes) -> bytes:
    """One to four mutations of an XML report."""
    data = document
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(9)
        if choice == 0 and data:  # cut short
            data = data[: rng.randrange(len(data))]
        elif choice == 1:  # a value replaced by a hostile one
            values = list(_XML_VALUE.finditer(data[:200_000]))
            if values:
                match = rng.choice(values)
                hostile = rng.choice(HOSTILE_TEXT).replace("<", "&lt;").encode("utf-8", "replace")
                data = data[: match.start(1)] + hostile + data[match.end(1):]
        elif choice == 2:  # an element duplicated many times
            elements = list(_XML_ELEMENT.finditer(data[:300_000]))
            if elements:
                match = rng.choice(elements)
                data = data[: match.end()] + match.group() * rng.choice((2, 10, 100, 500)) + data[match.end():]
        elif choice == 3 and data:  # junk bytes
            at = rng.randrange(len(data))
            data = data[:at] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 40))) + data[at:]
        elif choice == 4 and len(data) > 2:  # a chunk deleted
            at = rng.randrange(len(data) - 1)
            data = data[:at] + data[at + rng.randint(1, 2000):]
        elif choice == 5:  # entities declared and used
            subset = rng.choice((b'<!ENTITY a "' + b"x" * 5000 + b'">', b'<!ENTITY a SYSTEM "file:///etc/passwd">',
                                 b'<!ELEMENT nvidia_smi_log ANY>', b'<!ENTITY % p SYSTEM "http://127.0.0.1:9/"> %p;'))
            data = re.sub(rb"<!DOCTYPE[^>]*>", b"", data, count=1)
            data = data.replace(b"<nvidia_smi_log>", b"<!DOCTYPE nvidia_smi_log [" + subset + b"]>\n<nvidia_smi_log>"
                                + b"&a;" * rng.randint(0, 50), 1)
        elif choice == 6:  # a hostile attribute
            data = data.replace(b'<gpu id="', b'<gpu id="' + rng.choice(HOSTILE_TEXT)[:20_000].replace("<", "&lt;")
                                .replace('"', "&quot;").encode("utf-8", "replace"), 1)
        elif choice == 7:  # deep nesting
            depth = rng.choice((10, 1000, 50_000))
            data = data.replace(b"</gpu>", b"<a>" * depth + b"</a>" * depth + b"</gpu>", 1)
        elif choice == 8:  # the root renamed
            data = data.replace(b"nvidia_smi_log", rng.choice((b"ixsmi_log", b"html", b"nvidia_smi_log")), 1)
    return data


def mutate_text(rng: random.Random, document: bytes) -> bytes:
    """One to four mutations of a ``nvidia-smi -q`` text report."""
    lines = document.decode("utf-8", "replace").splitlines()
    for _ in range(rng.randint(1, 4)):
        if not lines:
            break
        choice = rng.randrange(7)
        at = rng.randrange(len(lines))
        if choice == 0:  # cut short
            lines = lines[:at]
        elif choice == 1 and " : " in lines[at]:  # a value replaced by a hostile one
            label = lines[at].split(" : ", 1)[0]
            lines[at] = f"{label} : {rng.choice(HOSTILE_TEXT)}"
        elif choice == 2:  # indentation changed
            lines[at] = " " * rng.choice((0, 1, 3, 17, 200)) + lines[at].lstrip()
        elif choice == 3:  # lines duplicated
            span = lines[at: at + rng.randint(1, 300)]
            lines[at:at] = span * rng.choice((2, 10, 200))
        elif choice == 4:  # junk line
            lines.insert(at, rng.choice(HOSTILE_TEXT) + rng.choice(("", " : ", " :", ":")))
        elif choice == 5:  # a GPU header duplicated or broken
            lines.insert(at, rng.choice(("GPU 00000000:3B:00.0", "GPU 00000000:3B:00", "GPU " + "0" * 300)))
        elif choice == 6:  # deep indentation run
            lines[at:at] = [" " * (4 + i) + f"Level {i} : {i}" for i in range(rng.choice((10, 500, 5000)))]
    return "\n".join(lines).encode("utf-8", "replace")


def mutate_record(rng: random.Random, record: dict[str, Any]) -> dict[str, Any]:
    """One to six mutations of a recorded NVML document: values of the wrong type or range, calls removed."""
    out = copy.deepcopy(record)
    for _ in range(rng.randint(1, 6)):
        choice = rng.randrange(5)
        devices = out.get("devices") if isinstance(out.get("devices"), list) else []
        if choice <= 1 and devices:  # a device call answered with a hostile value
            device = rng.choice(devices)
            if isinstance(device, dict) and device:
                device[rng.choice(sorted(device))] = copy.deepcopy(rng.choice(HOSTILE_JSON))
        elif choice == 2 and isinstance(out.get("system"), dict):  # a system call answered with a hostile value
            system = out["system"]
            system[rng.choice(sorted(system) or ["nvmlDeviceGetCount"])] = copy.deepcopy(rng.choice(HOSTILE_JSON))
        elif choice == 3 and devices:  # a call removed
            device = rng.choice(devices)
            if isinstance(device, dict) and device:
                device.pop(rng.choice(sorted(device)))
        elif choice == 4:  # the envelope broken
            key = rng.choice(("process_names", "devices", "system", "format"))
            out[key] = copy.deepcopy(rng.choice(HOSTILE_JSON + [{"x": "y"}, {"1": 2}, {"-5": "n"}]))
    return out


def evaluate(kind: str, data: bytes | dict[str, Any]) -> dict[str, Any]:
    """Parse one case, run every node rule over it and build its result's JSON; exceptions escape (the bug)."""
    from infradoctor.findings import run_rules
    from infradoctor.node.evidence import GpuExpectation, KernelLogEvidence, NodeEvidence
    from infradoctor.node.gpu.base import GpuProbe
    from infradoctor.node.gpu.nvml import NvmlBackend, RecordFormatError, ReplayNvml
    from infradoctor.node.gpu.smi_xml import parse_smi_report
    from infradoctor.node.snapshot import NodeRequest, build_result

    probe: GpuProbe
    if kind == "nvml":
        assert isinstance(data, dict)
        try:
            replay = ReplayNvml(data)
        except RecordFormatError:
            return {}
        backend = NvmlBackend(replay, source="fuzz", process_name=replay.process_name)
        backend.sample()
        probe = backend.probe()
    else:
        assert isinstance(data, bytes)
        probe = parse_smi_report(data, source="fuzz")
    evidence = NodeEvidence(host=None, gpu=probe.snapshot, kernel=KernelLogEvidence("fuzz", 0, ()),
                            expectation=GpuExpectation(None, (), False, None), notes=probe.notes)
    run_rules(evidence)
    result = build_result(NodeRequest(host=False), evidence, started_at="2026-01-01T00:00:00Z", duration_s=0.0)
    return result.to_dict()
