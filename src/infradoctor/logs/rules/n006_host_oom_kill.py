"""N006 host-memory-pressure, from kernel logs: the OOM killer ended a process.

What it detects:
    Kernel lines "Out of memory: Killed process ...", "... invoked oom-killer", "oom-kill:...", "Memory cgroup out
    of memory".

Why it matters:
    A model server, tokenizer worker or data loader killed by the kernel dies without a Python traceback; the router
    then reports resets or no healthy upstream, and the real cause is only in the kernel log.

How it is measured:
    Signature catalog matches in kernel (or any) logs merged into incidents per source and time window.

Fix:
    Lower worker counts or data cached in RAM, set container memory limits that match what the process needs, add
    RAM or move work to another node; check for host memory growth.
"""

from __future__ import annotations

from infradoctor.findings import Finding
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.rules import RuleOptions
from infradoctor.logs.rules._signature import signature_findings

CODE = "N006"


def check(evidence: LogsEvidence, options: RuleOptions) -> list[Finding]:
    """One finding with every OOM-killer incident."""
    return signature_findings(evidence, CODE, ("host_oom_kill",), "Kernel OOM killer")
