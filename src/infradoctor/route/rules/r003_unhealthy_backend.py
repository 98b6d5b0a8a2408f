"""R003 unhealthy-backend: one backend's errors or latency stand out from the others'.

What it detects:
    A backend that is down (its direct requests cannot connect), one whose error rate is significantly higher
    than the other backends', or one whose median latency is at least twice theirs. The finding names the
    backend by its URL.

Why it matters:
    Behind a round-robin router one bad node fails or slows a fixed share of all requests, which looks like a
    service-wide problem. Passive health checks and retries may hide it from the router's own error rate while
    still costing latency and capacity.

How it is measured:
    Direct requests to each backend, plus routed requests the upstream header attributes to it, plus routed
    attempts on it that the router retried elsewhere (nginx lists every upstream tried). Down: at least
    ``DOWN_FRACTION`` of direct requests fail to connect. Errors: rate at least ``ERROR_RATE_MIN``, above twice
    the others' rate plus ``ERROR_RATE_MARGIN``, one-sided two-proportion p-value below ``ERROR_P_VALUE``.
    Latency: the lower end of its p50 confidence interval is above ``LATENCY_RATIO`` times the upper end of every
    other backend's, and at least ``LATENCY_MARGIN_MS`` more (thresholds in ``route/rules/_common.py``).

Fix:
    Drain or restart that backend and look at its logs and node (``infradoctor node`` on it). Enable outlier
    detection or passive health checks (nginx ``max_fails``/``fail_timeout``, HAProxy ``observe layer7``, Envoy
    ``outlier_detection``) so the router stops sending to it.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Severity, make_finding
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import (
    RuleOptions,
    error_standout,
    is_down,
    latency_standout,
    requests_and_errors,
)

CODE = "R003"


def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R003 for each backend that is down, fails more often, or is much slower than the others."""
    findings: list[Finding] = []
    for backend in evidence.backends:
        requests, errors = requests_and_errors(backend)
        base = {
            "backend": backend.url,
            "direct_requests": backend.direct.requests,
            "direct_errors": dict(backend.direct.errors),
            "direct_error_rate": round(backend.direct.error_rate, 4),
            "routed_served": backend.served,
            "routed_errors": backend.routed_errors,
            "routed_failed_attempts": backend.failed_attempts,
            "direct_p50_ms": backend.direct.p50.value,
            "direct_p99_ms": backend.direct.p99.value,
        }
        share = 1.0 / max(1, len(evidence.backends))
        if is_down(backend):
            findings.append(
                make_finding(
                    CODE,
                    f"Backend {backend.url} is down: {backend.direct.error_count} of {backend.direct.requests} "
                    f"direct requests could not connect",
                    {**base, "state": "down"},
                    severity=Severity.HIGH,
                    impact=share,
                )
            )
            continue
        p_value = error_standout(evidence, backend)
        if p_value is not None:
            findings.append(
                make_finding(
                    CODE,
                    f"Backend {backend.url} fails {errors / requests:.0%} of requests "
                    f"({errors} of {requests}; direct {backend.direct.error_rate:.0%})",
                    {**base, "state": "failing", "error_rate": round(errors / requests, 4), "p_value": p_value},
                    severity=Severity.HIGH,
                    impact=share * errors / requests,
                )
            )
            continue
        ratio = latency_standout(evidence, backend)
        if ratio is not None:
            findings.append(
                make_finding(
                    CODE,
                    f"Backend {backend.url} is {ratio:.1f}x slower than the others at p50 "
                    f"({backend.direct.p50.value:.1f} ms direct)",
                    {**base, "state": "slow", "slowdown": round(ratio, 3)},
                    severity=Severity.MEDIUM,
                    impact=share,
                )
            )
    return findings
