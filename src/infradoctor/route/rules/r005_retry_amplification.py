"""R005 retry-amplification: the backends see more attempts than the client sent requests.

What it detects:
    The router retries failed or slow upstream attempts, so each client request costs the backends more than one
    attempt.

Why it matters:
    Retries turn a backend that is struggling into one that is overloaded: every failure adds load exactly when
    capacity is short (a retry storm). Retried requests also take longer, and non-idempotent requests may run
    twice.

How it is measured:
    From the router's attempt count header (``x-envoy-attempt-count``), from upstream address lists with several
    entries (nginx ``$upstream_addr`` returned in a header, e.g. ``add_header X-Upstream-Addr $upstream_addr``),
    or from backend request counters read before and after the run (``--counter-path``) minus the direct
    requests. Reported when attempts per client request reach ``MIN_AMPLIFICATION`` and there are at least
    ``MIN_EXTRA_ATTEMPTS`` extra attempts; high severity from ``HIGH_AMPLIFICATION``.

Fix:
    Give retries a budget (Envoy ``retry_budget`` 20%, min 3; nginx ``proxy_next_upstream_tries 2`` and
    ``proxy_next_upstream_timeout``), retry only idempotent requests with jittered backoff, honour
    ``Retry-After``, and fix the failing backend (see R003).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Severity, make_finding
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions

CODE = "R005"

MIN_AMPLIFICATION = 1.05
"""Backend attempts per client request from which retries are reported."""

MIN_EXTRA_ATTEMPTS = 3
"""Extra attempts needed (a couple of retries is noise)."""

HIGH_AMPLIFICATION = 1.5
"""From this amplification the finding is high severity."""


def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R005 when backend attempts exceed client requests."""
    retries = evidence.retries
    if retries is None or retries.client_requests == 0:
        return []
    if retries.amplification < MIN_AMPLIFICATION or retries.extra_attempts < MIN_EXTRA_ATTEMPTS:
        return []
    severity = Severity.HIGH if retries.amplification >= HIGH_AMPLIFICATION else Severity.MEDIUM
    title = (
        f"Retries amplify backend load {retries.amplification:.2f}x: {retries.backend_attempts} attempts for "
        f"{retries.client_requests} client requests ({retries.source})"
    )
    return [
        make_finding(
            CODE,
            title,
            {**retries.to_dict(), "router": evidence.router_url},
            severity=severity,
            impact=min(1.0, retries.extra_attempts / retries.backend_attempts) if retries.backend_attempts else None,
        )
    ]
