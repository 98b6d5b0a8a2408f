"""N006 host-memory-pressure: host RAM nearly exhausted, or heavy swap use.

What it detects:
    The host runs out of memory. From ``infradoctor node``: memory available to new work below
    :data:`AVAILABLE_FRACTION` of RAM, or swap more than :data:`SWAP_USED_FRACTION` used (and at least
    :data:`SWAP_MIN_BYTES`). From logs (``infradoctor logs``): the kernel's OOM killer ended a process ("Out of
    memory: Killed process ...", "... invoked oom-killer", "oom-kill:...", "Memory cgroup out of memory").

Why it matters:
    With little available memory the kernel drops page cache (data loading slows), swaps (everything slows), or the
    OOM killer ends a process: often a DataLoader worker, a tokenizer worker, the model server or the training job
    itself, which dies without a Python traceback (a router then reports resets or no healthy upstream, and the real
    cause is only in the kernel log). Heavy swap use means working memory already lives on disk.

How it is measured:
    psutil ``virtual_memory().available`` (the kernel's MemAvailable estimate) against total, and
    ``swap_memory()`` used against total. The largest processes by resident memory are listed as evidence.
    Severity ``high`` by default, ``critical`` below :data:`CRITICAL_AVAILABLE_FRACTION` available.

    From logs (`infradoctor logs`): Signature catalog matches in kernel (or any) logs merged into incidents per
    source and time window.

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor node``; ``prometheus`` under ``infradoctor fleet``) or ``logs``.

    The two measure different sides of the same shortage (the memory left, the processes killed for it), so they
    share no number. From the probe: ``available_fraction``, ``available_gib``, ``total_gib``,
    ``swap_used_fraction``, ``swap_used_gib``, ``top_rss`` (the largest processes). From logs: the OOM-kill
    incidents' summary: ``kinds``, ``count`` (log lines), ``failures``, ``incidents``, ``files``, ``subjects``,
    ``first``, ``last``, ``windows``, ``example``.

Fix:
    Find the largest processes (evidence) or the killed ones. Reduce DataLoader workers or per-worker caching, load
    datasets with memory mapping, shrink pinned-memory buffers, set container memory limits that match what the
    process needs, or add RAM or move work to a node with more of it; check for host memory growth.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions, signature_findings
from infradoctor.node.evidence import NodeEvidence
from infradoctor.node.rules._common import MIB, NodeOptions, gib, pct

RULE = Rule(
    "N006",
    "host-memory-pressure",
    Severity.HIGH,
    "Host memory is nearly exhausted or swapping",
    fix="Reduce worker count or dataset caching; add RAM or move work to another node.",
    risk="Fewer workers lower throughput.",
    commands=("node", "logs"),
)

AVAILABLE_FRACTION = 0.10
"""Available / total RAM below which memory counts as nearly exhausted."""
CRITICAL_AVAILABLE_FRACTION = 0.03
"""Available share below which severity is critical."""
SWAP_USED_FRACTION = 0.50
"""Swap used / swap total above which swap use counts as heavy."""
SWAP_MIN_BYTES = 256 * MIB
"""Swap use below this never counts as heavy."""


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """At most one finding for the host."""
    if evidence.host is None:
        return []
    mem = evidence.host.memory
    low_memory = mem.available_fraction < options.threshold(RULE.code, "AVAILABLE_FRACTION", AVAILABLE_FRACTION)
    heavy_swap = (
        mem.swap_used_fraction > options.threshold(RULE.code, "SWAP_USED_FRACTION", SWAP_USED_FRACTION)
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
        RULE.finding(
            "Host memory pressure: " + "; ".join(parts),
            {
                "source": "probe",
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


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding with every OOM-killer incident."""
    return signature_findings(evidence, RULE, ("host_oom_kill",), "Kernel OOM killer")
