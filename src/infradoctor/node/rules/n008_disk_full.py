"""N008 disk-full: a filesystem in use is nearly full (space or inodes).

What it detects:
    A mounted filesystem that this machine's work uses (the root, the working directory, home, the temp directory,
    ``HF_HOME``/``TORCH_HOME``-style caches, and mounted block devices) that is more than :data:`USED_FRACTION`
    used, has less than :data:`MIN_FREE_BYTES` free (on filesystems of at least :data:`MIN_FREE_APPLIES_FROM_BYTES`),
    or has more than :data:`INODES_USED_FRACTION` of its inodes used.

Why it matters:
    A full disk fails checkpoint writes (often at the end of a long run), log writes, model downloads and temp
    files; databases and package installs break in odd ways. Running out of inodes looks the same with free space
    left.

How it is measured:
    psutil ``disk_usage`` (as ``df``: used / (used + free available to users)) and ``os.statvfs`` for inodes, per
    mount. Severity ``high``; ``critical`` at :data:`CRITICAL_FRACTION` used.

Fix:
    Delete or move old checkpoints, logs, caches (``~/.cache/huggingface``, pip, conda) and core dumps; point caches
    at a larger volume; grow the volume.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Location, Rule, Severity
from infradoctor.node.evidence import NodeEvidence
from infradoctor.node.rules._common import GIB, NodeOptions, gib, pct

RULE = Rule(
    "N008",
    "disk-full",
    Severity.HIGH,
    "A disk in use is nearly full",
    fix="Free space (old checkpoints, logs, caches) or grow the volume.",
    risk="Deleting checkpoints loses restart points.",
    commands=("node",),
)

USED_FRACTION = 0.90
"""Used share above which a filesystem counts as nearly full."""
CRITICAL_FRACTION = 0.98
"""Used share at which severity is critical."""
MIN_FREE_BYTES = 1 * GIB
"""Free space below which a filesystem counts as nearly full ..."""
MIN_FREE_APPLIES_FROM_BYTES = 10 * GIB
"""... when it is at least this large (small partitions like /boot are judged by share only)."""
INODES_USED_FRACTION = 0.90
"""Inodes used share above which a filesystem counts as nearly full."""


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per nearly full filesystem."""
    if evidence.host is None:
        return []
    used_limit = options.threshold(RULE.code, "USED_FRACTION", USED_FRACTION)
    min_free = options.threshold(RULE.code, "MIN_FREE_BYTES", MIN_FREE_BYTES)
    inode_limit = options.threshold(RULE.code, "INODES_USED_FRACTION", INODES_USED_FRACTION)
    findings = []
    for disk in evidence.host.disks:
        reasons = []
        if disk.used_fraction > used_limit:
            reasons.append(f"{pct(disk.used_fraction)}% used")
        if disk.total_bytes >= MIN_FREE_APPLIES_FROM_BYTES and disk.free_bytes < min_free:
            reasons.append(f"{gib(disk.free_bytes)} GiB free")
        inodes = disk.inodes_used_fraction
        if inodes is not None and inodes > inode_limit:
            reasons.append(f"{pct(inodes)}% of inodes used")
        if not reasons:
            continue
        severity = Severity.CRITICAL if disk.used_fraction >= CRITICAL_FRACTION else None
        findings.append(
            RULE.finding(
            f"{disk.mountpoint} nearly full: " + ", ".join(reasons),
                {
                    "mountpoint": disk.mountpoint,
                    "device": disk.device,
                    "used_fraction": round(disk.used_fraction, 4),
                    "free_gib": gib(disk.free_bytes),
                    "total_gib": gib(disk.total_bytes),
                    "inodes_used_fraction": round(inodes, 4) if inodes is not None else None,
                    "used_by": list(disk.why),
                },
                severity=severity,
                location=Location(file=disk.mountpoint),
            )
        )
    return findings
