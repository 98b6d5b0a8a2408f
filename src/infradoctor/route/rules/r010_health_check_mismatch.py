"""R010 health-check-mismatch: a backend's health endpoint says healthy while its predictions fail.

What it detects:
    A backend whose health endpoint answers 2xx while a large share of its real (prediction) requests fail or
    time out.

Why it matters:
    The router's health checks keep such a backend in rotation, so its failures reach users. Typical cause: the
    health check only proves the process is up (``/health`` returns 200 before the model has loaded, after the GPU
    has failed, or while the inference worker is wedged).

How it is measured:
    After the interleaved run, each backend's health path is requested (``--health-path``; else the first of
    ``/health``, ``/healthz``, ``/ready``, ``/v1/models`` that answers other than 404). Reported when it answered
    2xx while at least ``MIN_ERROR_RATE`` of the backend's direct requests failed, with at least
    ``MIN_REQUESTS`` direct requests. A backend that is down (nothing listening) is R003, not this.

Fix:
    Make the health check exercise the model: a readiness endpoint that runs a tiny inference or checks that the
    model is loaded and the worker responsive (``/v1/models`` for OpenAI-compatible servers), and gate traffic on
    readiness, not liveness.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions, is_down

RULE = Rule(
    "R010",
    "health-check-mismatch",
    Severity.HIGH,
    "Backend reports healthy while its predictions fail",
    fix="Make the health check exercise the model (or /v1/models readiness), not just the process.",
    risk="Deeper health checks cost backend capacity.",
    commands=("route",),
)

MIN_ERROR_RATE = 0.2
"""Share of failing direct requests from which a healthy answer is a mismatch."""

MIN_REQUESTS = 10
"""Direct requests needed."""


@RULE.check(RouteEvidence, RuleOptions)
def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R010 for each backend that reports healthy while its requests fail."""
    findings: list[Finding] = []
    for backend in evidence.backends:
        health = backend.health
        direct = backend.direct
        if health is None or not health.healthy or direct.requests < MIN_REQUESTS or is_down(backend):
            continue
        if direct.error_rate < MIN_ERROR_RATE:
            continue
        findings.append(
            RULE.finding(
            f"Backend {backend.url} answers {health.status} on {health.url} while "
                f"{direct.error_rate:.0%} of its requests fail",
                {
                    "backend": backend.url,
                    "health_url": health.url,
                    "health_status": health.status,
                    "direct_requests": direct.requests,
                    "direct_error_rate": round(direct.error_rate, 4),
                    "direct_errors": dict(direct.errors),
                },
                impact=direct.error_rate / max(1, len(evidence.backends)),
            )
        )
    return findings
