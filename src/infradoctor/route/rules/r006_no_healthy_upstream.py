"""R006 no-healthy-upstream: the router answers (nearly) every request with an error because no backend works.

What it detects:
    Almost every routed request fails with a gateway error (502, 503) while every backend behind the router is
    down (its direct requests cannot connect) or reports itself unhealthy.

Why it matters:
    This is a full outage, not a degraded backend: the router has nothing to send traffic to. Envoy reports it as
    ``503 UH no healthy upstream``, nginx as ``no live upstreams``. Causes: all pods crashing or still loading the
    model, a failing readiness probe, a wrong upstream port.

How it is measured:
    The routed error rate is at least ``MIN_ROUTED_ERROR_RATE``, mostly ``http_502``/``http_503``/``http_504``
    (``GATEWAY_SHARE``), and each ``--backend`` is down or answered its health check with a non-2xx status.

Fix:
    Find why the backends fail: start them, check their logs and readiness (model loaded? right port?), and fix
    the health check so it passes once the model serves. Then check the router's upstream list.
"""

from __future__ import annotations

from infradoctor.findings import Finding, make_finding
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions, is_down

CODE = "R006"

MIN_ROUTED_ERROR_RATE = 0.9
"""Share of routed requests that must fail."""

GATEWAY_SHARE = 0.8
"""Share of those failures that must be gateway errors (502/503/504)."""

GATEWAY_CLASSES = frozenset({"http_502", "http_503", "http_504"})
"""Error classes a router returns when it has no upstream to use."""


def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R006 when the router fails nearly everything and no backend is usable."""
    router = evidence.router
    if router.requests == 0 or router.error_rate < MIN_ROUTED_ERROR_RATE or not evidence.backends:
        return []
    gateway = sum(n for cls, n in router.errors.items() if cls in GATEWAY_CLASSES)
    if gateway < GATEWAY_SHARE * router.error_count:
        return []
    states = {}
    for backend in evidence.backends:
        if is_down(backend):
            states[backend.url] = "down"
        elif backend.health is not None and not backend.health.healthy:
            states[backend.url] = f"health {backend.health.status or 'no answer'}"
        else:
            return []
    return [
        make_finding(
            CODE,
            f"No healthy upstream: {router.error_rate:.0%} of routed requests failed "
            f"({', '.join(f'{k} {v}' for k, v in router.errors.items())}) and every backend is down or unhealthy",
            {"router": evidence.router_url, "routed_errors": dict(router.errors), "backends": states},
            impact=router.error_rate,
        )
    ]
