"""What the rules over logs share: their options, and one finding per signature family with its incidents."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infradoctor.findings import Finding, Location, Rule, Severity
from infradoctor.logs.evidence import Incident, LogsEvidence, iso
from infradoctor.logs.signatures import BY_ID


@dataclass(frozen=True)
class LogsRuleOptions:
    """Options every rule over logs receives."""

    min_requests: int = 20
    """Request-based rules stay quiet below this many requests (too few to judge)."""


MAX_LISTED_INCIDENTS = 5
"""Incidents listed in a finding's evidence (all of them are in ``metrics.incidents``)."""


def incident_summary(incidents: Sequence[Incident]) -> dict[str, object]:
    """Evidence common to signature findings: totals, subjects, first/last time, the largest windows."""
    subjects: Counter[str] = Counter()
    for incident in incidents:
        subjects[incident.subject] += incident.count
    starts = [i.start_s for i in incidents if i.start_s is not None]
    ends = [i.end_s for i in incidents if i.end_s is not None]
    return {
        "count": sum(i.count for i in incidents),
        "failures": sum(i.failures for i in incidents),
        "incidents": len(incidents),
        "files": sorted({s for i in incidents for s in i.sources}),
        "subjects": dict(sorted(subjects.items(), key=lambda kv: (-kv[1], kv[0]))[:10]),
        "first": iso(min(starts)) if starts else None,
        "last": iso(max(ends)) if ends else None,
        "windows": [
            {k: v for k, v in i.to_dict().items() if k != "examples"} for i in incidents[:MAX_LISTED_INCIDENTS]
        ],
        "example": incidents[0].examples[0] if incidents and incidents[0].examples else None,
    }


def signature_findings(
    evidence: LogsEvidence, rule: Rule, signatures: Sequence[str], what: str, severity: Severity | None = None,
    extra: Mapping[str, object] | None = None,
) -> list[Finding]:
    """One finding of ``rule`` for all incidents of ``signatures`` (which map to its code), or none.

    Its evidence: ``source`` (``logs``), ``extra``'s keys, ``kinds`` (lines per signature) and
    :func:`incident_summary`'s keys.
    """
    incidents = evidence.incidents_of(*signatures)
    if not incidents:
        return []
    summary = incident_summary(incidents)
    subjects = summary["subjects"]
    assert isinstance(subjects, dict)
    top = ", ".join(list(subjects)[:3])
    count = int(str(summary["count"]))
    failures = int(str(summary["failures"]))
    windows = len(incidents)
    title = (f"{what}: {plural(failures, 'failure')} in {plural(windows, 'window')}"
             + (f" ({count} log lines)" if count != failures else "")
             + (f" at {top}" if top and top != "-" else ""))
    fixes = " ".join(dict.fromkeys(BY_ID[s].fix for s in signatures if s in BY_ID))
    evidence_dict = {"source": "logs", **(extra or {}),
                     "kinds": {s: evidence.signature_counts.get(s, 0) for s in signatures
                               if evidence.signature_counts.get(s)}, **summary}
    return [rule.finding(title, evidence_dict, severity=severity, fix=fixes or None,
                         impact=_share(evidence, failures), location=largest_file(incidents))]


def plural(count: int, word: str) -> str:
    """``1 failure``, ``3 failures``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def largest_file(incidents: Sequence[Incident]) -> Location | None:
    """The log file of the largest incident, as the finding's location."""
    return Location(incidents[0].source) if incidents and incidents[0].source else None


def _share(evidence: LogsEvidence, count: int) -> float | None:
    return min(1.0, count / evidence.requests) if evidence.requests else None
