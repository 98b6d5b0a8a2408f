"""N006 host-memory-pressure: host RAM nearly exhausted, or heavy swap use.

What it detects:
    Memory available to new work below :data:`AVAILABLE_FRACTION` of RAM, or swap more than
    :data:`SWAP_USED_FRACTION` used (and at least :data:`SWAP_MIN_BYTES`).

Why it matters:
    With little available memory the kernel drops page cache (data loading slows), swaps (everything slows), or the
    OOM killer ends a process: often a DataLoader worker or the training job itself. Heavy swap use means working
    memory already lives on disk.

How it is measured:
    psutil ``virtual_memory().available`` (the kernel's MemAvailable estimate) against total, and
    ``swap_memory()`` used against total. The largest processes by resident memory are listed as evidence.
    Severity ``high`` by default, ``critical`` below :data:`CRITICAL_AVAILABLE_FRACTION` available.

Fix:
    Find the largest processes (evidence). Reduce DataLoader workers or per-worker caching, load datasets with
    memory mapping, shrink pinned-memory buffers, or move work to a node with more RAM.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Severity, make_finding
from infradoctor.node.evidence import NodeEvidence
from infradoctor.node.rules._common import MIB, NodeOptions, gib, pct

CODE = "N006"

AVAILABLE_FRACTION = 0.10
"""Available / total RAM below which memory counts as nearly exhausted."""
CRITICAL_AVAILABLE_FRACTION = 0.03
"""Available share below which severity is critical."""
SWAP_USED_FRACTION = 0.50
"""Swap used / swap total above which swap use counts as heavy."""
SWAP_MIN_BYTES = 256 * MIB
"""Swap use below this never counts as heavy."""


def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """At most one finding for the host."""
    if evidence.host is None:
        return []
    mem = evidence.host.memory
    low_memory = mem.available_fraction < options.threshold(CODE, "AVAILABLE_FRACTION", AVAILABLE_FRACTION)
    heavy_swap = (
        mem.swap_used_fraction > options.threshold(CODE, "SWAP_USED_FRACTION", SWAP_USED_FRACTION)
        and mem.swap_used_bytes >= SWAP_MIN_BYTES
    )
    if not (low_memory or heavy_swap):
        return []
    parts = []
    if low_memory:
        parts.append(f"only {pct(mem.available_fraction)}% of RAM available ({gib(mem.available_bytes)} GiB)")
    if heavy_swap:
        parts.append(f"swap {pct(mem.swap_used_fraction)}% used ({gib(mem.swap_used_bytes)} GiB)")
    severity = Severity.CRITICAL if mem.available_fraction < CRITICAL_AVAILABLE_FRACTION else None
    return [
        make_finding(
            CODE,
            "Host memory pressure: " + "; ".join(parts),
            {
                "available_fraction": round(mem.available_fraction, 4),
                "available_gib": gib(mem.available_bytes),
                "total_gib": gib(mem.total_bytes),
                "swap_used_fraction": round(mem.swap_used_fraction, 4),
                "swap_used_gib": gib(mem.swap_used_bytes),
                "top_rss": [
                    {"pid": p.pid, "name": p.name, "rss_gib": gib(p.rss_bytes)} for p in evidence.host.top_rss
                ],
            },
            severity=severity,
        )
    ]
