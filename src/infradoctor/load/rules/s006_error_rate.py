"""S006 error-rate: requests fail under load.

What it detects:
    A non-saturated point where at least ``THRESHOLD`` (1%) of the finished requests failed: transport errors
    (connect refused/timeout, reset, read timeout, stream aborted) or HTTP 429, 4xx or 5xx responses.

Why it matters:
    Failures are what users see first. Their class says where to look: 503/429 are the service shedding load,
    other 5xx are server bugs or crashes, resets and aborted streams are crashes or proxies cutting connections,
    refused connections mean nothing listens, timeouts mean the service is slower than the client will wait.

How it is measured:
    Per point, failed / finished requests with the breakdown by class. The finding reports the worst point, the
    lowest load level where the rate first reached the threshold (onset) and the classes there. Severity is high
    from ``HIGH_THRESHOLD`` (10%) or when nothing succeeded, medium below.

Fix:
    Follow the dominant class: capacity or admission limits for 503/429 and timeouts, the request for other 4xx,
    the server's logs for 500 and resets, the address and port for connection refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.load.evidence import LoadEvidence

RULE = Rule(
    "S006",
    "error-rate",
    Severity.HIGH,
    "Requests fail under load",
    fix="See the error classes: fix capacity for 503/timeouts, the client for 4xx, the server for resets.",
    risk="Depends on the cause.",
    commands=("load", "profile"),
)
THRESHOLD = 0.01
"""A point with at least this failed share has an error problem."""
HIGH_THRESHOLD = 0.10
"""At or above this failed share the finding is high severity."""


@RULE.check(LoadEvidence, None)
def check(evidence: LoadEvidence, options: Mapping[str, Any] | None = None) -> list[Finding]:
    """S006 at the worst point with errors at or above the threshold."""
    failing = [p for p in evidence.valid_points if p.error_rate >= THRESHOLD]
    if not failing:
        return []
    worst = max(failing, key=lambda p: (p.error_rate, p.level))
    onset = min(failing, key=lambda p: p.level)
    classes = dict(sorted(worst.errors.items(), key=lambda kv: -kv[1]))
    top = ", ".join(f"{name} {count}" for name, count in list(classes.items())[:3])
    severity = Severity.HIGH if worst.error_rate >= HIGH_THRESHOLD else Severity.MEDIUM
    unit = "concurrency" if worst.mode == "closed" else "req/s"
    return [
        RULE.finding(
            f"{worst.error_rate:.1%} of requests failed at {unit} {worst.level:g} ({top})",
            {
                "worst_point": worst.label,
                "error_rate": round(worst.error_rate, 5),
                "errors": classes,
                "onset_point": onset.label,
                "onset_level": onset.level,
                "onset_error_rate": round(onset.error_rate, 5),
                "per_point": {p.label: round(p.error_rate, 5) for p in evidence.valid_points},
            },
            severity=severity,
        )
    ]
