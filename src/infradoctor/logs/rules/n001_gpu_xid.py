"""N001 gpu-xid, from kernel logs.

What it detects:
    ``NVRM: Xid (PCI:...): N`` lines: the NVIDIA driver reporting a GPU error with code N.

Why it matters:
    Some codes are application faults (13, 31, 43: fix or restart the app), others mean the GPU or board is failing
    (48 double-bit ECC, 79 fallen off the bus, 64/95 ECC containment failures, 74 NVLink): jobs on that GPU will
    keep failing or hang until it is reset or replaced.

How it is measured:
    Kernel lines are matched by the signature catalog; the code and device come from the Xid line; each code is
    looked up in the Xid table shared with ``infradoctor node`` (``infradoctor.xid``) for meaning, origin and
    action. Severity follows the action: critical for reboot or drain, high for a GPU reset, medium for
    application errors, low when nothing is to be done.

Fix:
    Act per code: application errors -> debug/restart the application; hardware errors -> reset the GPU
    (nvidia-smi -r) when idle, reboot for 79, drain the node and RMA when ECC/NVLink errors repeat.
"""

from __future__ import annotations

from collections import Counter

from infradoctor.findings import Finding, make_finding
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.rules import RuleOptions
from infradoctor.xid import xid_info

CODE = "N001"


def check(evidence: LogsEvidence, options: RuleOptions) -> list[Finding]:
    """One finding per Xid code."""
    by_code: Counter[int] = Counter()
    devices: dict[int, set[str]] = {}
    for (code, device), count in evidence.xids.items():
        by_code[code] += count
        devices.setdefault(code, set()).add(device)
    findings = []
    for code, count in sorted(by_code.items()):
        info = xid_info(code)
        gpus = sorted(devices[code])
        findings.append(make_finding(
            CODE,
            f"Xid {code} ({info.meaning}) x{count} on {', '.join(gpus[:4])}",
            {"xid": code, "count": count, "devices": gpus, "meaning": info.meaning, "origin": info.origin,
             "action": info.action, "hardware": info.hardware},
            severity=info.severity,
            fix=info.advice,
        ))
    return findings
