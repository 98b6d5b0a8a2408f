"""N015 fleet-onset: which problem started first in the incident window, and which change came just before it.

What it detects:
    Among the findings of a fleet run whose signal could be followed over time, the one whose signal crossed its
    rule's threshold first: the onset of the incident. With ``--changes FILE`` (deploys, configuration changes),
    the last change before that onset, when it lies at most ``CHANGE_LOOKBACK_S`` before it.

Why it matters:
    In an incident every node looks sick at once: retries on the routers, queues on the model servers, restarts
    in Kubernetes. The problem that appeared first is usually the cause and the rest its consequences, and a
    change shortly before the onset is the first thing to roll back.

How it is measured:
    For each finding (a node, a GPU and the signal its rule judges), a range query over the window at the
    window's step; the onset is the first step at or beyond the rule's threshold. A signal already bad at the
    window's first step started before the window: it is reported as such (widen the window to see its start),
    and it still counts as earliest. Severity: ``high`` when a change precedes the onset within
    ``CHANGE_LOOKBACK_S``, else ``info``.

Fix:
    Start with the first problem: the later findings may be its consequences. When a change precedes it, roll
    the change back (or compare before and after it) before anything else.
"""

from __future__ import annotations

from datetime import datetime, timezone

from infradoctor.findings import Finding, Location, Rule, Severity
from infradoctor.fleet.evidence import Change, Onset, OnsetEvidence
from infradoctor.node.rules._common import NodeOptions

RULE = Rule(
    "N015",
    "fleet-onset",
    Severity.INFO,
    "The first problem of the incident, and the change before it",
    fix="Start with the first problem; roll back a change that preceded it.",
    risk="Rolling back a change also drops what it fixed.",
    commands=("fleet",),
)

CHANGE_LOOKBACK_S = 3600.0
"""Longest time from a change to the onset for the change to be named as preceding it."""


def iso(at: float) -> str:
    """Unix time as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _order(onset: Onset) -> tuple[float, str]:
    return (onset.first_bad if onset.first_bad is not None else float("inf"), onset.entity)


@RULE.check(OnsetEvidence, NodeOptions)
def check(evidence: OnsetEvidence, options: NodeOptions) -> list[Finding]:
    """One finding: the earliest onset, with the change before it."""
    timed = sorted((o for o in evidence.onsets if o.first_bad is not None), key=_order)
    if not timed:
        return []
    first = timed[0]
    assert first.first_bad is not None
    lookback = options.threshold(RULE.code, "CHANGE_LOOKBACK_S", CHANGE_LOOKBACK_S)
    before = [c for c in evidence.changes if c.at <= first.first_bad and first.first_bad - c.at <= lookback]
    change: Change | None = max(before, key=lambda c: c.at) if before else None
    when = "before the window started" if first.bad_at_start else f"at {iso(first.first_bad)}"
    title = f"First problem: {first.entity} {first.signal} ({first.code}) {when}"
    if change is not None and not first.bad_at_start:
        title += f", {(first.first_bad - change.at) / 60:.0f} min after change: {change.description[:80]}"
    later = [{"code": o.code, "entity": o.entity, "signal": o.signal, "first_bad": iso(o.first_bad)}
             for o in timed[1:6] if o.first_bad is not None]
    return [RULE.finding(
        title,
        {"code": first.code, "entity": first.entity, "signal": first.signal, "first_bad": iso(first.first_bad),
         "bad_at_window_start": first.bad_at_start, "threshold": first.threshold, "finding": first.title,
         "preceding_change": ({"at": iso(change.at), "description": change.description, "node": change.node}
                              if change is not None else None),
         "changes_in_file": len(evidence.changes), "followed_by": later},
        severity=Severity.HIGH if change is not None and not first.bad_at_start else None,
        location=Location(file=first.entity),
    )]
