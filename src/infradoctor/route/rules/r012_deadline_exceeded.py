"""R012 deadline-exceeded, from application logs.

What it detects:
    "context deadline exceeded", ``DeadlineExceeded`` / ``DEADLINE_EXCEEDED`` in application, gRPC or proxy logs.

Why it matters:
    A caller gave up: the work took longer than the deadline it was given. Either one hop is slow or the deadline
    is shorter than the work legitimately needs; retries on deadline errors add load exactly when the service is
    slow.

How it is measured:
    Signature catalog matches merged into incidents per source and time window.

Fix:
    Find the slow hop from per-stage timing (Server-Timing, traces); raise the deadline only if the work needs it;
    propagate deadlines so servers stop work nobody waits for.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions, signature_findings

RULE = Rule(
    "R012",
    "deadline-exceeded",
    Severity.HIGH,
    "Requests exceed their deadline",
    fix="Find the slow hop from per-stage timing; raise deadlines only if the work legitimately needs it.",
    risk="Longer deadlines hide slowness.",
    commands=("logs",),
)


@RULE.check(LogsEvidence, LogsRuleOptions)
def check(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding with every deadline-exceeded incident."""
    return signature_findings(evidence, RULE, ("deadline_exceeded",), "Deadline exceeded")
