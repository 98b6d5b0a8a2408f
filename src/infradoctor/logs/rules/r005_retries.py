"""R005 retry-amplification, from router logs.

What it detects:
    Requests that needed more than one upstream attempt: several comma-separated values in nginx
    ``$upstream_addr``/``$upstream_status``, Envoy ``%UPSTREAM_REQUEST_ATTEMPT_COUNT%`` > 1 or the ``URX`` flag
    (retry limit exceeded), HAProxy's retry counter.

Why it matters:
    Each retry is another request to a backend. When a backend is slow or failing, retries multiply the load on the
    remaining ones exactly when they have the least headroom (a retry storm).

How it is measured:
    Share of requests with more than one attempt, and extra attempts per request, from the attempts histogram; the
    finding fires at :data:`RETRY_SHARE` (5%) or above (at least ``min_requests`` requests), or on any ``URX``.

Fix:
    Use a retry budget (e.g. Envoy retry_budget 20%, min 3) instead of fixed counts; retry only idempotent requests
    with jittered backoff; honour Retry-After; fix the failing first attempt (see the other findings).
"""

from __future__ import annotations

from infradoctor.findings import Finding, make_finding
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.rules import RuleOptions

CODE = "R005"
RETRY_SHARE = 0.05
"""Share of requests with more than one upstream attempt at or above which retries matter."""


def check(evidence: LogsEvidence, options: RuleOptions) -> list[Finding]:
    """Retry share from the attempts histogram, and retry-limit incidents."""
    counted = sum(c for a, c in evidence.attempts.items() if a >= 1)
    retried = sum(c for a, c in evidence.attempts.items() if a > 1)
    extra = sum((a - 1) * c for a, c in evidence.attempts.items() if a > 1)
    exhausted = evidence.signature_counts.get("retry_limit_exceeded", 0)
    share = retried / counted if counted else 0.0
    if (counted >= options.min_requests and share >= RETRY_SHARE) or exhausted:
        title = f"{share:.0%} of requests needed more than one upstream attempt" if counted else \
            f"{exhausted} requests exhausted their retries"
        return [make_finding(CODE, title, {
            "requests_with_attempts": counted, "retried_requests": retried, "retry_share": round(share, 4),
            "extra_attempts": extra, "load_multiplier": round((counted + extra) / counted, 3) if counted else None,
            "retry_limit_exceeded": exhausted, "attempts_histogram": {str(k): v for k, v in evidence.attempts.items()},
        }, impact=share or None)]
    return []
