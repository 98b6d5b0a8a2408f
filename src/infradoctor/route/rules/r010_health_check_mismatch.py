"""R010 health-check-mismatch: a backend's health endpoint says healthy while its predictions fail.

What it detects:
    Health checks that say healthy while the backend's real (prediction) requests fail: from ``infradoctor route``,
    a backend whose health endpoint answers 2xx while a large share of its requests fail or time out; from the
    router's statistics (``--router-stats``), hosts the router holds healthy while their requests fail, or every
    host failing the router's own health check while it keeps routing to them (panic mode).

Why it matters:
    The router's health checks keep such a backend in rotation, so its failures reach users. Typical cause: the
    health check only proves the process is up (``/health`` returns 200 before the model has loaded, after the GPU
    has failed, or while the inference worker is wedged).

How it is measured:
    After the interleaved run, each backend's health path is requested (``--health-path``; else the first of
    ``/health``, ``/healthz``, ``/ready``, ``/v1/models`` that answers other than 404). Reported when it answered
    2xx while at least ``MIN_ERROR_RATE`` of the backend's direct requests failed, with at least
    ``MIN_REQUESTS`` direct requests. A backend that is down (nothing listening) is R003, not this.

    From the router's statistics (``--router-stats``): every host fails the router's own active health check while
    the router keeps routing to them (Envoy panic mode: ``lb_healthy_panic`` grows, ``membership_healthy`` 0):
    the health check and the traffic disagree; or the router holds a host healthy while ``HOST_ERROR_SHARE`` of
    its requests fail.

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor route``), ``router-stats`` or ``prometheus`` (``fleet``).
    - ``requests``: the requests it judged: direct requests to the backend, the host's attempts, or (panic mode)
      the client's requests through the router (None when unknown).
    - ``errors``: how many of them failed.
    - ``error_rate``: ``errors`` over ``requests`` (0-1; None when unknown).

    From the probe also: ``backend``, ``health_url``, ``health_status``, ``error_classes`` (failed direct requests
    by class).

    From the router's statistics also: for a host held healthy, ``backend``, ``router_name``, ``flags``; in panic
    mode, ``router_stats``, ``router`` (its kind), ``panic_requests``, ``membership_healthy``, ``membership_total``,
    ``hosts`` (the failing ones, with their flags), ``client_errors``.

Fix:
    Make the health check exercise the model: a readiness endpoint that runs a tiny inference or checks that the
    model is loaded and the worker responsive (``/v1/models`` for OpenAI-compatible servers), and gate traffic on
    readiness, not liveness.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions, is_down
from infradoctor.route.rules._router import client_requests, counter, gauge_max, host_label, stats_source
from infradoctor.route.rules.r003_unhealthy_backend import host_errors
from infradoctor.telemetry.evidence import RouterEvidence

RULE = Rule(
    "R010",
    "health-check-mismatch",
    Severity.HIGH,
    "Backend reports healthy while its predictions fail",
    fix="Make the health check exercise the model (or /v1/models readiness), not just the process.",
    risk="Deeper health checks cost backend capacity.",
    commands=("route", "load"),
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
                    "source": "probe",
                    "requests": direct.requests,
                    "errors": direct.error_count,
                    "error_rate": round(direct.error_rate, 4),
                    "backend": backend.url,
                    "health_url": health.url,
                    "health_status": health.status,
                    "error_classes": dict(direct.errors),
                },
                impact=direct.error_rate / max(1, len(evidence.backends)),
            )
        )
    return findings


HOST_ERROR_SHARE = 0.2
"""Share of a host's requests failing while the router holds it healthy that is a mismatch."""

HOST_MIN_REQUESTS = 10
"""Requests a host needs for that."""


@RULE.check(RouterEvidence)
def check_router(evidence: RouterEvidence, options: object) -> list[Finding]:
    """R010 for panic routing (every host failing the router's health check) and healthy-but-failing hosts."""
    findings = []
    panic = counter(evidence, "panic")
    window = evidence.window
    if panic > 0:
        failing = [h for h in window.hosts if window.worst_states.get(f"{h.group}/{h.name}", h.state) != "healthy"]
        total = gauge_max(evidence, "membership_total") or len(window.hosts)
        healthy = window.gauges["membership_healthy"].last if "membership_healthy" in window.gauges else None
        names = ", ".join(host_label(evidence, h) for h in failing[:6]) or "its hosts"
        clients = client_requests(evidence)
        errors = sum(evidence.client_errors.values())
        findings.append(RULE.finding(
            f"{len(failing) or total:.0f} of {total:.0f} hosts fail the router's active health check, yet it kept "
            f"routing to them in panic mode ({panic:.0f} requests): {names}",
            {"source": stats_source(evidence), "requests": clients or None, "errors": errors,
             "error_rate": round(errors / clients, 4) if clients else None, "router_stats": window.source,
             "router": window.kind, "panic_requests": panic, "membership_healthy": healthy,
             "membership_total": total, "hosts": {h.name: h.flags for h in failing},
             "client_errors": dict(evidence.client_errors)},
            severity=Severity.HIGH,
            impact=min(1.0, panic / max(1.0, clients)),
        ))
    for host in window.hosts:
        if window.worst_states.get(f"{host.group}/{host.name}", host.state) != "healthy":
            continue
        failed, attempts = host_errors(host)
        if attempts < HOST_MIN_REQUESTS or failed / attempts < HOST_ERROR_SHARE:
            continue
        findings.append(RULE.finding(
            f"The router holds {host_label(evidence, host)} healthy while {failed / attempts:.0%} of its "
            f"{attempts:.0f} requests fail",
            {"source": stats_source(evidence), "requests": attempts, "errors": failed,
             "error_rate": round(failed / attempts, 4), "backend": evidence.backend_names.get(host.name) or host.name,
             "router_name": host.name, "flags": host.flags},
            impact=failed / attempts / max(1, len(window.hosts)),
        ))
    return findings
