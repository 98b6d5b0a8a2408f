"""R012 deadline-exceeded, from application logs.

What it detects:
    "context deadline exceeded", ``DeadlineExceeded`` / ``DEADLINE_EXCEEDED`` in application, gRPC or proxy logs.

Why it matters:
    A caller gave up: the work took longer than the deadline it was given. Either one hop is slow or the deadline
    is shorter than the work legitimately needs; retries on deadline errors add load exactly when the service is
    slow.

How it is measured:
    Signature catalog matches merged into incidents per source and time window. High when at least
    :data:`HIGH_MIN_FAILURES` (10) deadlines are exceeded, or at least :data:`HIGH_SHARE` (5%) of the requests in
    the same logs; else medium (one exec probe timing out in a kubelet log is worth knowing, not an outage).

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


HIGH_MIN_FAILURES = 10
"""Deadlines exceeded at or above which the finding is high."""
HIGH_SHARE = 0.05
"""... or this share of the requests in the same logs."""


@RULE.check(LogsEvidence, LogsRuleOptions)
def check(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding with every deadline-exceeded incident; high only when they are many."""
    failures = sum(i.failures for i in evidence.incidents_of("deadline_exceeded"))
    many = failures >= HIGH_MIN_FAILURES or (evidence.requests > 0 and failures / evidence.requests >= HIGH_SHARE
                                             and evidence.requests >= options.min_requests)
    return signature_findings(evidence, RULE, ("deadline_exceeded",), "Deadline exceeded",
                              severity=Severity.HIGH if many else Severity.MEDIUM)
