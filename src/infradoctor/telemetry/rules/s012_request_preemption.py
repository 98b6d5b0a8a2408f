"""S012 request-preemption: the model server preempts running requests to free KV cache.

What it detects:
    Growth of the server's preemption counter (vLLM ``vllm:num_preemptions_total``) during a point of the sweep.

Why it matters:
    A preempted request goes back to the waiting queue and its KV cache is recomputed (or swapped) later: the
    work is paid twice, its latency jumps, and throughput falls exactly when load is highest.

How it is measured:
    The counter's growth per point; the first point with at least ``MIN_PREEMPTIONS`` is where preemptions
    started, reported with the total over the sweep and the KV-cache usage there.

Fix:
    Lower the concurrency the server admits (vLLM ``--max-num-seqs``) or give the KV cache more memory (see
    S011), so that admitted requests can run to completion; route long prompts to replicas sized for them.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.telemetry.evidence import ServerEvidence
from infradoctor.telemetry.rules._common import point_facts, rise, where

RULE = Rule(
    "S012",
    "request-preemption",
    Severity.MEDIUM,
    "The model server preempts requests",
    fix="Admit fewer sequences (max-num-seqs) or give the KV cache more memory so admitted requests finish.",
    risk="Fewer admitted sequences lower peak throughput.",
    commands=("load", "route"),
)

MIN_PREEMPTIONS = 1.0
"""Preemptions within a point from which they count as started."""


@RULE.check(ServerEvidence)
def check(evidence: ServerEvidence, options: object) -> list[Finding]:
    """S012 at the first point with preemptions."""
    total = sum(p.server.preemptions or 0.0 for p in evidence.points)
    for point in evidence.points:
        count = point.server.preemptions or 0.0
        if count < MIN_PREEMPTIONS:
            continue
        grew = rise(evidence, point)
        title = f"Preemptions started at {where(point)} ({count:.0f} there, {total:.0f} in all)" + (
            f"; {grew}" if grew else "")
        return [RULE.finding(title, {"server": evidence.source, "kind": evidence.kind, **point_facts(point),
                                     "preemptions_total": total, "metric": point.server.names.get("preemptions")},
                             severity=Severity.HIGH if grew else None)]
    return []
