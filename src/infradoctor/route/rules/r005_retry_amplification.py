"""R005 retry-amplification: the backends see more attempts than the client sent requests.

What it detects:
    The router retries failed or slow upstream attempts, so each client request costs the backends more than one
    attempt: seen from ``infradoctor route`` (attempt headers, upstream lists, backend counters), in logs (several
    comma-separated values in nginx ``$upstream_addr``/``$upstream_status``, Envoy
    ``%UPSTREAM_REQUEST_ATTEMPT_COUNT%`` > 1 or the ``URX`` flag (retry limit exceeded), HAProxy's retry counter),
    or counted by the router itself (``--router-stats``).

Why it matters:
    Retries turn a backend that is struggling into one that is overloaded: every failure adds load exactly when the
    remaining capacity is short (a retry storm). Retried requests also take longer, and non-idempotent requests may
    run twice.

How it is measured:
    From the router's attempt count header (``x-envoy-attempt-count``), from upstream address lists with several
    entries (nginx ``$upstream_addr`` returned in a header, e.g. ``add_header X-Upstream-Addr $upstream_addr``),
    or from backend request counters read before and after the run (``--counter-path``) minus the direct
    requests. With ``--router-stats`` the router's own counters decide: Envoy ``upstream_rq_retry`` (and
    ``_success``, ``_overflow``: refused by the retry budget or breaker, ``_limit_exceeded``, ``_backoff_*``: retries
    that waited a backoff), HAProxy ``wretr``; attempts per request = (client requests + retries) / client requests.
    Reported when attempts per client request reach ``MIN_AMPLIFICATION`` and there are at least
    ``MIN_EXTRA_ATTEMPTS`` extra attempts; high severity from ``HIGH_AMPLIFICATION``.

    From logs (`infradoctor logs`): Share of requests with more than one attempt, and extra attempts per request,
    from the attempts histogram; the finding fires at :data:`RETRY_SHARE` (5%) or above (at least ``min_requests``
    requests), or on any ``URX`` (each flag of a list such as ``UF,URX`` counts). Exhausted retries alone are high
    with at least ``min_requests`` requests and :data:`RETRY_SHARE` of them exhausted; with fewer requests they are
    medium (too few to judge a retry rate; the failure behind them is its own finding).

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor route``), ``logs``, ``router-stats`` or ``prometheus`` (``fleet``).
    - ``client_requests``: requests the client sent (from logs: requests that log their attempts).
    - ``backend_attempts``: attempts the backends saw for them.
    - ``extra_attempts``: attempts beyond one per request (the retries).
    - ``amplification``: ``backend_attempts`` over ``client_requests``.
    - ``retried_requests``: requests that took more than one attempt; None where it is not counted (backend or
      router counters).

    From the probe also: ``counted_from`` (``attempt-header``, ``upstream-list`` or ``backend-counters``),
    ``router``, ``router_added_p50_ms``.

    From logs also: ``retry_share`` (``retried_requests`` over ``client_requests``), ``retry_limit_exceeded``,
    ``requests`` (all requests in the logs), ``attempts_histogram``.

    From the router's statistics also: ``router_stats``, ``router`` (its kind), ``retry_success``,
    ``retry_overflow``, ``retry_limit_exceeded``, ``retry_backoff``, ``connect_failures``.

Fix:
    Give retries a budget (Envoy ``retry_budget`` 20%, min 3; nginx ``proxy_next_upstream_tries 2`` and
    ``proxy_next_upstream_timeout``) instead of fixed counts, retry only idempotent requests with jittered backoff,
    honour ``Retry-After``, and fix the failing first attempt (see R003 and the other findings).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions
from infradoctor.route.rules._router import client_requests, counter, stats_source
from infradoctor.telemetry.evidence import RouterEvidence

RULE = Rule(
    "R005",
    "retry-amplification",
    Severity.HIGH,
    "Retries multiply backend load",
    fix="Use a retry budget (e.g. 20%), retry only idempotent requests with jittered backoff, honour Retry-After.",
    risk="Fewer retries surface more transient errors to clients.",
    commands=("route", "load", "logs"),
)

MIN_AMPLIFICATION = 1.05
"""Backend attempts per client request from which retries are reported."""

MIN_EXTRA_ATTEMPTS = 3
"""Extra attempts needed (a couple of retries is noise)."""

HIGH_AMPLIFICATION = 1.5
"""From this amplification the finding is high severity."""


@RULE.check(RouteEvidence, RuleOptions)
def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R005 when backend attempts exceed client requests."""
    retries = evidence.retries
    if evidence.router_stats is not None and "retries" in evidence.router_stats.window.counters:
        return []  # the router's own retry counters decide (check_router), not what the responses suggest
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
        RULE.finding(
            title,
            {"source": "probe", **{k: v for k, v in retries.to_dict().items() if k != "source"},
             "counted_from": retries.source, "router": evidence.router_url,
             "router_added_p50_ms": evidence.attribution.added_p50.value},
            severity=severity,
            impact=min(1.0, retries.extra_attempts / retries.backend_attempts) if retries.backend_attempts else None,
        )
    ]


RETRY_SHARE = 0.05
"""Share of requests with more than one upstream attempt at or above which retries matter."""


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """Retry share from the attempts histogram, and retry-limit incidents."""
    counted = sum(c for a, c in evidence.attempts.items() if a >= 1)
    retried = sum(c for a, c in evidence.attempts.items() if a > 1)
    extra = sum((a - 1) * c for a, c in evidence.attempts.items() if a > 1)
    exhausted = evidence.signature_counts.get("retry_limit_exceeded", 0)
    share = retried / counted if counted else 0.0
    retrying = counted >= options.min_requests and share >= RETRY_SHARE
    if not (retrying or exhausted):
        return []
    enough = evidence.requests >= options.min_requests
    severity = Severity.HIGH if retrying or (enough and exhausted / evidence.requests >= RETRY_SHARE) \
        else Severity.MEDIUM
    if retrying:
        title = f"{share:.0%} of {counted} requests needed more than one upstream attempt"
    else:
        title = (f"{exhausted} request{'s' if exhausted != 1 else ''} exhausted their retries"
                 + (f" ({exhausted / evidence.requests:.0%} of {evidence.requests})" if evidence.requests else ""))
    return [RULE.finding(
        title, {
            "source": "logs", "client_requests": counted, "backend_attempts": counted + extra, "extra_attempts": extra,
            "amplification": round((counted + extra) / counted, 4) if counted else None, "retried_requests": retried,
            "retry_share": round(share, 4), "retry_limit_exceeded": exhausted, "requests": evidence.requests,
            "attempts_histogram": {str(k): v for k, v in evidence.attempts.items()},
        }, severity=severity, impact=share or None)]


@RULE.check(RouterEvidence)
def check_router(evidence: RouterEvidence, options: object) -> list[Finding]:
    """R005 from the router's own retry counters: attempts per request, retries refused, backoff waited."""
    retries = counter(evidence, "retries")
    clients = client_requests(evidence)
    if not clients or retries < MIN_EXTRA_ATTEMPTS or retries / clients < MIN_AMPLIFICATION - 1.0:
        return []
    amplification = (clients + retries) / clients
    success = counter(evidence, "retry_success")
    overflow = counter(evidence, "retry_overflow")
    exhausted = counter(evidence, "retry_limit_exceeded")
    backoff = counter(evidence, "retry_backoff")
    parts = [f"{success:.0f} succeeded"] if "retry_success" in evidence.window.counters else []
    if overflow:
        parts.append(f"{overflow:.0f} refused by the retry budget/circuit breaker")
    if exhausted:
        parts.append(f"{exhausted:.0f} requests ran out of retries")
    if backoff:
        parts.append(f"{backoff:.0f} waited a backoff")
    title = (f"The router retried {retries:.0f} times for {clients:.0f} client requests ({amplification:.2f} "
             f"attempts per request" + (f"; {', '.join(parts)}" if parts else "") + ")")
    return [RULE.finding(
        title,
        {"source": stats_source(evidence), "client_requests": clients, "backend_attempts": clients + retries,
         "extra_attempts": retries, "amplification": round(amplification, 4), "retried_requests": None,
         "router_stats": evidence.window.source, "router": evidence.window.kind, "retry_success": success,
         "retry_overflow": overflow, "retry_limit_exceeded": exhausted,
         "retry_backoff": backoff, "connect_failures": counter(evidence, "connect_fail")},
        severity=Severity.HIGH if amplification >= HIGH_AMPLIFICATION else Severity.MEDIUM,
        impact=min(1.0, retries / (clients + retries)),
    )]
