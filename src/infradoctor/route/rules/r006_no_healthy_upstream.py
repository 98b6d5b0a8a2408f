"""R006 no-healthy-upstream: the router answers (nearly) every request with an error because no backend works.

What it detects:
    The router answers requests with an error itself because no backend is available. From ``infradoctor route``:
    almost every routed request fails with a gateway error (502, 503) while every backend behind the router is down
    (its direct requests cannot connect) or reports itself unhealthy. From logs (``infradoctor logs``): Envoy
    ``UH``/``NR`` flags and "no healthy upstream", nginx "no live upstreams" (and 502/503 whose ``$upstream_addr``
    is the upstream group's name), HAProxy ``<NOSRV>`` with 503.

Why it matters:
    This is an outage, not a degraded backend: the router has nothing to send traffic to, and every such request
    fails without reaching a model. Envoy reports it as ``503 UH no healthy upstream``, nginx as
    ``no live upstreams``. Causes: all pods crashing or still loading the model while the router already sends
    traffic, a failing readiness probe, a wrong upstream port, outlier ejection of a whole small pool.

How it is measured:
    The routed error rate is at least ``MIN_ROUTED_ERROR_RATE``, mostly ``http_502``/``http_503``/``http_504``
    (``GATEWAY_SHARE``), and each ``--backend`` is down or answered its health check with a non-2xx status.

    From logs (`infradoctor logs`): Lines are classified by the signature catalog (``infradoctor.logs.signatures``)
    and merged into incidents per subject and time window; the finding lists the windows.

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor route``) or ``logs``.
    - ``failures``: requests that failed for it (routed requests that failed; from logs the failed requests of
      the incidents).

    From the probe also: ``router``, ``routed_requests``, ``routed_errors`` (by class) and ``backends`` (each
    backend's state: ``down`` or its health answer).

    From logs also: the incidents' summary: ``kinds`` (lines per signature), ``count`` (log lines), ``incidents``,
    ``files``, ``subjects``, ``first``, ``last``, ``windows``, ``example``.

Fix:
    Find why the backends fail: start them, check their logs and readiness (model loaded? right port?), gate
    readiness on the model being loaded and fix the health check so it passes once the model serves; then check the
    router's upstream list, and Envoy's panic threshold and outlier ejection (``max_ejection_percent``) so a small
    pool is not ejected entirely.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions, signature_findings
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions, is_down

RULE = Rule(
    "R006",
    "no-healthy-upstream",
    Severity.CRITICAL,
    "The router had no healthy upstream",
    fix="Check why backends fail health checks (crashing, still loading the model); fix readiness probes.",
    risk="None.",
    commands=("route", "logs"),
)

MIN_ROUTED_ERROR_RATE = 0.9
"""Share of routed requests that must fail."""

GATEWAY_SHARE = 0.8
"""Share of those failures that must be gateway errors (502/503/504)."""

GATEWAY_CLASSES = frozenset({"http_502", "http_503", "http_504"})
"""Error classes a router returns when it has no upstream to use."""


@RULE.check(RouteEvidence, RuleOptions)
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
        RULE.finding(
            f"No healthy upstream: {router.error_rate:.0%} of routed requests failed "
            f"({', '.join(f'{k} {v}' for k, v in router.errors.items())}) and every backend is down or unhealthy",
            {"source": "probe", "failures": router.error_count, "router": evidence.router_url,
             "routed_requests": router.requests, "routed_errors": dict(router.errors), "backends": states},
            impact=router.error_rate,
        )
    ]


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding with every no-healthy-upstream incident."""
    return signature_findings(evidence, RULE, ("no_healthy_upstream",), "No healthy upstream")
