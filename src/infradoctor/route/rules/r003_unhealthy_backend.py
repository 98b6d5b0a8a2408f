"""R003 unhealthy-backend: one backend's errors or latency stand out from the others'.

What it detects:
    One backend whose errors or latency stand out from the others', named: from ``infradoctor route``, a backend
    that is down (its direct requests cannot connect), fails significantly more often than the others, or has at
    least twice their median latency; from logs (``infradoctor logs``), an upstream whose error rate or p99 is far
    above the other upstreams' in the same logs; from the router's statistics (``--router-stats``), a host the
    router ejected, took out of rotation, sees failing its health checks, or counts many failed attempts on.

Why it matters:
    Behind a round-robin router one bad node (bad GPU, stuck worker, wrong model version) fails or slows a fixed
    share of all requests, which looks like a service-wide problem. Passive health checks and retries may hide it
    from the router's own error rate while still costing latency and capacity.

How it is measured:
    Direct requests to each backend, plus routed requests the upstream header attributes to it, plus routed
    attempts on it that the router retried elsewhere (nginx lists every upstream tried). Down: at least
    ``DOWN_FRACTION`` of direct requests fail to connect. Errors: rate at least ``ERROR_RATE_MIN``, above twice
    the others' rate plus ``ERROR_RATE_MARGIN``, one-sided two-proportion p-value below ``ERROR_P_VALUE``.
    Latency: the lower end of its p50 confidence interval is above ``LATENCY_RATIO`` times the upper end of every
    other backend's, and at least ``LATENCY_MARGIN_MS`` more (thresholds in ``route/rules/_common.py``).

    From logs (`infradoctor logs`): Per upstream with at least ``min_requests`` attempts: error rate (5xx or no
    status) at least :data:`ERROR_RATE_MIN` (5%) and at least :data:`OUTLIER_FACTOR` (3) times the median of the
    others; or p99 at least :data:`LATENCY_P99_MIN_MS` (100 ms) and :data:`OUTLIER_FACTOR` times the others' median
    p99. Needs two or more upstreams.

    From the router's statistics (``--router-stats``): a host the router ejected (Envoy ``/failed_outlier_check``),
    took out of rotation or sees failing its checks (Envoy ``/failed_active_hc``, HAProxy ``DOWN`` or ``UP 1/3``),
    or whose connect failures and errors (Envoy per-host ``cx_connect_fail``, ``rq_error``; HAProxy ``econ``,
    ``eresp``, ``hrsp_5xx``) reach ``HOST_ERROR_SHARE`` of its attempts (at least ``HOST_MIN_ERRORS``), named by
    the ``--backend`` it is (the router's host name and address mapped to it).

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor route``), ``logs``, ``router-stats`` (``--router-stats``, a saved
      dump) or ``prometheus`` (``infradoctor fleet``).
    - ``backend``: the backend named: its ``--backend`` URL (the router's host mapped to it where it can be);
      from logs the upstream address.
    - ``state``: why it stands out: ``down``, ``failing`` (errors) or ``slow`` (latency); from the router's
      statistics its worst state in the run (``ejected``, ``down``, ``failing``, ``maint``, or ``healthy`` while
      many of its attempts failed).
    - ``attempts``: requests that reached or tried it (direct, routed ones it served and routed attempts retried
      elsewhere; from logs and the router, its upstream attempts).
    - ``errors``: how many of them failed.
    - ``error_rate``: ``errors`` over ``attempts`` (0-1; None without attempts).

    From the probe also: ``direct_requests``, ``direct_errors`` (by class), ``direct_error_rate``,
    ``routed_served``, ``routed_errors``, ``routed_failed_attempts``, ``direct_p50_ms``, ``direct_p99_ms``;
    ``p_value`` (failing), ``slowdown`` (slow).

    From logs also: ``others_median_error_rate`` (failing); ``p50_ms``, ``p99_ms`` and ``others_median_p99_ms``
    (slow).

    From the router's statistics also: ``router_name``, ``address``, ``group``, ``flags`` and the host's
    ``counters``.

Fix:
    Drain or restart that backend and look at its logs and node (``infradoctor node`` on it). Enable outlier
    detection or passive health checks (nginx ``max_fails``/``fail_timeout``, HAProxy ``observe layer7``, Envoy
    ``outlier_detection``) so the router stops sending to it.
"""

from __future__ import annotations

import statistics

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence, UpstreamStats
from infradoctor.logs.incidents import LogsRuleOptions
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import (
    RuleOptions,
    error_standout,
    is_down,
    latency_standout,
    requests_and_errors,
)
from infradoctor.route.rules._router import host_label, stats_source
from infradoctor.telemetry.evidence import RouterEvidence
from infradoctor.telemetry.router import HostState

RULE = Rule(
    "R003",
    "unhealthy-backend",
    Severity.HIGH,
    "One backend's errors or latency stand out",
    fix="Drain or restart that backend; enable outlier detection / passive health checks.",
    risk="Ejecting a backend raises load on the others.",
    commands=("route", "load", "logs"),
)


@RULE.check(RouteEvidence, RuleOptions)
def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R003 for each backend that is down, fails more often, or is much slower than the others."""
    findings: list[Finding] = []
    for backend in evidence.backends:
        requests, errors = requests_and_errors(backend)
        base = {
            "source": "probe",
            "backend": backend.url,
            "attempts": requests,
            "errors": errors,
            "error_rate": round(errors / requests, 4) if requests else None,
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
                RULE.finding(
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
                RULE.finding(
            f"Backend {backend.url} fails {errors / requests:.0%} of requests "
                    f"({errors} of {requests}; direct {backend.direct.error_rate:.0%})",
                    {**base, "state": "failing", "p_value": p_value},
                    severity=Severity.HIGH,
                    impact=share * errors / requests,
                )
            )
            continue
        ratio = latency_standout(evidence, backend)
        if ratio is not None:
            findings.append(
                RULE.finding(
            f"Backend {backend.url} is {ratio:.1f}x slower than the others at p50 "
                    f"({backend.direct.p50.value:.1f} ms direct)",
                    {**base, "state": "slow", "slowdown": round(ratio, 3)},
                    severity=Severity.MEDIUM,
                    impact=share,
                )
            )
    return findings


ERROR_RATE_MIN = 0.05
"""Error rate at or above which an upstream can be an outlier."""
OUTLIER_FACTOR = 3.0
"""How many times the others' median an upstream must reach."""
LATENCY_P99_MIN_MS = 100.0
"""p99 at or above which a latency outlier matters."""


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """Error-rate and latency outliers among upstreams."""
    pool = [u for u in evidence.upstreams if u.attempts >= options.min_requests and u.upstream != "-"]
    if len(pool) < 2:
        return []
    findings = []
    for upstream in pool:
        others = [u for u in pool if u is not upstream]
        finding = _error_outlier(upstream, others) or _latency_outlier(upstream, others)
        if finding is not None:
            findings.append(finding)
    return findings


def _error_outlier(upstream: UpstreamStats, others: list[UpstreamStats]) -> Finding | None:
    baseline = statistics.median(u.error_rate for u in others)
    rate = upstream.error_rate
    if rate < ERROR_RATE_MIN or rate < OUTLIER_FACTOR * baseline:
        return None
    return RULE.finding(
            f"{upstream.upstream} fails {rate:.0%} of its requests (others: {baseline:.1%})", {
        **_logs_base(upstream, "failing"), "others_median_error_rate": round(baseline, 4),
    })


def _latency_outlier(upstream: UpstreamStats, others: list[UpstreamStats]) -> Finding | None:
    values = [u.p99_ms for u in others if u.p99_ms is not None]
    if upstream.p99_ms is None or not values:
        return None
    baseline = statistics.median(values)
    if upstream.p99_ms < LATENCY_P99_MIN_MS or upstream.p99_ms < OUTLIER_FACTOR * max(baseline, 1.0):
        return None
    return RULE.finding(
            f"{upstream.upstream} p99 is {upstream.p99_ms:.0f} ms (others: {baseline:.0f} ms)", {
        **_logs_base(upstream, "slow"), "p99_ms": upstream.p99_ms, "p50_ms": upstream.p50_ms,
        "others_median_p99_ms": baseline,
    }, severity=None)


def _logs_base(upstream: UpstreamStats, state: str) -> dict[str, object]:
    return {"source": "logs", "backend": upstream.upstream, "state": state, "attempts": upstream.attempts,
            "errors": upstream.errors, "error_rate": round(upstream.error_rate, 4)}


HOST_ERROR_SHARE = 0.05
"""Share of a host's attempts that failed (router's per-host counters) from which it stands out."""

HOST_MIN_ERRORS = 3
"""Failed attempts a host needs before its error share is judged."""

_STATE_WORDS = {
    "ejected": "the router ejected it (outlier detection)",
    "down": "the router took it out of rotation (health checks failing)",
    "failing": "it fails the router's health checks",
    "maint": "it is in maintenance",
}


def host_errors(host: HostState) -> tuple[float, float]:
    """A host's failed attempts and all its attempts, from the router's per-host counters.

    Envoy counts a failed connect in both ``cx_connect_fail`` and ``rq_error``; HAProxy's ``econ`` (connect),
    ``eresp`` (response) and ``hrsp_5xx`` are separate.
    """
    c = host.counters
    if "rq_error" in c or "cx_connect_fail" in c:
        failed = max(c.get("rq_error", 0.0), c.get("cx_connect_fail", 0.0))
        return failed, max(c.get("rq_total", 0.0), c.get("rq_success", 0.0) + failed)
    failed = c.get("econ", 0.0) + c.get("eresp", 0.0) + c.get("hrsp_5xx", 0.0)
    return failed, max(c.get("stot", 0.0) + c.get("econ", 0.0), failed)


@RULE.check(RouterEvidence)
def check_router(evidence: RouterEvidence, options: object) -> list[Finding]:
    """R003 for each host the router ejected, took out, sees failing, or counts many errors on."""
    findings = []
    panic = evidence.window.counters.get("panic", 0.0) > 0
    for host in evidence.window.hosts:
        worst = evidence.window.worst_states.get(f"{host.group}/{host.name}", host.state)
        failed, total = host_errors(host)
        erring = failed >= HOST_MIN_ERRORS and total > 0 and failed / total >= HOST_ERROR_SHARE
        if worst not in _STATE_WORDS and not erring:
            continue
        words = [_STATE_WORDS[worst]] if worst in _STATE_WORDS else []
        if worst == "failing" and panic:
            words.append("yet it stays in rotation (panic mode)")
        if erring:
            words.append(f"{failed:.0f} of its {total:.0f} attempts failed")
        label = host_label(evidence, host)
        findings.append(RULE.finding(
            f"Backend {label}: " + "; ".join(words) + f" ({evidence.window.kind} flags: {host.flags or host.state})",
            {"source": stats_source(evidence),
             "backend": evidence.backend_names.get(host.name) or evidence.backend_names.get(host.address or "")
             or host.name, "state": worst, "attempts": total, "errors": failed,
             "error_rate": round(failed / total, 4) if total else None, "router_name": host.name,
             "address": host.address, "group": host.group, "flags": host.flags, "counters": dict(host.counters)},
            severity=Severity.HIGH if worst in ("ejected", "down") or erring else Severity.MEDIUM,
            impact=1.0 / max(1, len(evidence.window.hosts)),
        ))
    return findings
