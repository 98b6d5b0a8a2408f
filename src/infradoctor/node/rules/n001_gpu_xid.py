"""N001 gpu-xid: NVIDIA Xid errors in the kernel log.

What it detects:
    ``NVRM: Xid (PCI:...): N`` lines: the NVIDIA driver reporting a GPU error with code N, in the kernel log
    ``node`` reads (dmesg, journalctl -k, /var/log/kern.log, or the file given with ``--kernel-log``), in log files
    given to ``infradoctor logs`` (with "GPU has fallen off the bus" printed without an Xid, as Xid 79), or as
    dcgm-exporter's last Xid under ``infradoctor fleet``. One finding per Xid code, with the GPUs involved.

Why it matters:
    An Xid is the driver reporting a GPU error. Some are the application's own fault (13, 31, 43: a bad kernel or
    illegal address; the GPU is fine); others mean the GPU needs a reset (48, 62, 95, 119, 120), the node needs a
    reboot (79: the GPU fell off the bus), or the board needs to be drained and replaced (64/95 ECC containment
    failures, 92, 74 NVLink when they recur). Jobs that hit them crash, hang or silently lose a GPU, and keep
    failing on it until it is reset or replaced.

How it is measured:
    Each Xid line is parsed (code, PCI address, pid and process name where printed) and looked up in a table of
    meaning, origin (application / hardware / driver) and action (restart app, reset GPU, reboot, drain): the table
    in ``infradoctor.xid``, shared with ``infradoctor logs``. Severity follows the action: ``critical`` for reboot
    or drain, ``high`` for a GPU reset, ``medium`` for application errors, ``low`` when nothing is to be done (45,
    121). The affected GPU is named by matching the PCI address to the GPU probe.

    From logs (`infradoctor logs`): Kernel lines are read by the reader ``infradoctor node`` uses
    (``infradoctor.xid.KernelLineReader``): Xid lines bare or behind any prefix, and "GPU has fallen off the bus"
    printed without an Xid (as Xid 79). Each code is looked up in the shared Xid table for meaning, origin and
    action, refined by the line where it says more (NVLink5 ``Fatal``/``Nonfatal``, Xid 154's recovery action).
    Severity follows the action: critical for reboot or drain, high for a GPU reset, medium for application errors
    and early warnings, low when nothing is to be done. An Xid 45 that says "caused by previous Xid N" is listed
    under code N (one root cause, not a separate finding per teardown).

Evidence:
    Every check gives:

    - ``source``: ``kernel-log`` (``infradoctor node``), ``logs`` or ``prometheus`` (``infradoctor fleet``).
    - ``xid``: the code.
    - ``count``: its lines (events).
    - ``devices``: the GPUs named: the probe's GPU labels where the PCI address matches one, else ``PCI:`` and
      the address as the line printed it.
    - ``meaning``, ``origin`` and ``action``: from the shared Xid table (``infradoctor.xid``); from logs the
      line's own recovery action where it prints one.
    - ``hardware``: whether the origin is the GPU, the board or the driver rather than the application.
    - ``example``: one line (the last from ``node``, the first from logs), cut at 300 characters.

    From ``node`` also: ``pci``, ``gpus`` (matched GPU labels), ``pids``, ``processes``, ``first_timestamp``,
    ``last_timestamp``, ``kernel_log``.

    From logs also: ``followed_by`` (Xid 45 lines naming this code as their cause, by code), ``followed_devices``,
    ``without_xid_line`` ("fallen off the bus" lines without an Xid).

Fix:
    Act per code, as the finding says: application errors -> fix, debug or restart the application; reset the GPU
    (``nvidia-smi -r -i N`` with no processes on it) for 48/62/63/95/119/120; reboot and drain for 79; drain and RMA
    when 64/92/95 or NVLink errors recur or row remapping failed (see N002).
"""

from __future__ import annotations

from collections import defaultdict

from infradoctor.findings import Finding, Location, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions
from infradoctor.node.evidence import NodeEvidence, XidEvent
from infradoctor.node.kernel import normalise_pci
from infradoctor.node.rules._common import NodeOptions
from infradoctor.xid import SEVERITY_BY_ACTION, event_info, xid_info

RULE = Rule(
    "N001",
    "gpu-xid",
    Severity.HIGH,
    "GPU Xid errors in the kernel log",
    fix="Act per Xid code: application errors -> fix/restart the app; hardware errors -> reset GPU, reboot, drain.",
    risk="Reset and reboot interrupt every job on the GPU/node.",
    commands=("node", "logs"),
)

@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per Xid code seen."""
    by_code: dict[int, list[XidEvent]] = defaultdict(list)
    for event in evidence.kernel.xid_events:
        by_code[event.code].append(event)
    gpu_by_pci = {normalise_pci(d.pci_bus_id): d for d in evidence.gpu.devices if d.pci_bus_id}
    findings = []
    for code, events in sorted(by_code.items()):
        info = xid_info(code)
        pcis = sorted({e.pci for e in events})
        matched = [gpu_by_pci.get(normalise_pci(p)) for p in pcis]
        gpus = [d.label for d in matched if d is not None]
        names = sorted({e.process_name for e in events if e.process_name})
        pids = sorted({e.pid for e in events if e.pid is not None})
        devices = gpus or [f"PCI:{p}" for p in pcis]
        where = ", ".join(devices)
        title = f"Xid {code} ({info.meaning}) x{len(events)} on {where}: {info.action}"
        findings.append(
            RULE.finding(
            title,
                {
                    "source": "kernel-log",
                    "xid": code,
                    "count": len(events),
                    "devices": devices,
                    "meaning": info.meaning,
                    "origin": info.origin,
                    "action": info.action,
                    "hardware": info.hardware,
                    "example": events[-1].message[:300],
                    "pci": pcis,
                    "gpus": gpus,
                    "pids": pids[:20],
                    "processes": names[:20],
                    "first_timestamp": events[0].timestamp,
                    "last_timestamp": events[-1].timestamp,
                    "kernel_log": evidence.kernel.source,
                },
                severity=info.severity,
                fix=info.advice,
                location=Location(file=evidence.kernel.source or "kernel log", line=events[0].line),
            )
        )
    return findings


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding per Xid code; an Xid 45 that names its cause is reported with that cause, not on its own.

    "GPU has fallen off the bus" printed without an Xid counts as Xid 79. A code that only Xid 45 lines name (its
    own line is not in the log) still gets its finding, from the table.
    """
    findings = []
    for lines in evidence.xid_codes:
        code = lines.code
        info = event_info(code, lines.example)
        action = lines.action or info.action
        severity = SEVERITY_BY_ACTION.get(action, info.severity)
        gpus = list(lines.devices or lines.followed_devices)
        where = ", ".join(gpus[:4]) + (f" and {len(gpus) - 4} more" if len(gpus) > 4 else "")
        if lines.count:
            what = ("GPU has fallen off the bus (no Xid line: as Xid 79)" if lines.without_xid == lines.count
                    else f"Xid {code} ({info.meaning})")
            title = f"{what} x{lines.count} on {where}: {action}"
        else:
            title = f"Xid {code} ({info.meaning}) named as the cause of later errors on {where}: {action}"
        if lines.followed:
            title += "; " + ", ".join(f"caused {n} Xid {c} line{'s' if n != 1 else ''}"
                                      for c, n in sorted(lines.followed.items()))
        findings.append(RULE.finding(
            title,
            {"source": "logs", "xid": code, "count": lines.count, "devices": gpus, "meaning": info.meaning,
             "origin": info.origin, "action": action, "hardware": info.hardware, "example": lines.example[:300],
             "followed_by": {str(c): n for c, n in lines.followed.items()},
             "followed_devices": list(lines.followed_devices), "without_xid_line": lines.without_xid},
            severity=severity,
            fix=info.advice if action == info.action else f"{info.advice} The log's own recovery action: {action}.",
        ))
    return findings
