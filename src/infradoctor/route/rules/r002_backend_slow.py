"""R002 backend-slow: requests are slow straight to the backends too; the router is not the problem.

What it detects:
    Requests are slow and the time is spent in the backends, not in the router. From ``infradoctor route``: routed
    requests are slow, and the same requests sent directly to the backends (interleaved in time) are just as slow.
    From logs (``infradoctor logs``): successful requests are slow and the router's own time is a small part of it.

Why it matters:
    Routers are often blamed for slow AI endpoints. When the time is spent in the backends, tuning or replacing the
    router cannot help: the model server, the model, its GPU or the node is the bottleneck, or the backends are
    overloaded.

How it is measured:
    The pooled direct median must reach ``--slow-ms`` (default ``DEFAULT_SLOW_MS``), and the router's added
    median must be under ``MAX_ROUTER_SHARE`` of the routed median or not significant (its 95% bootstrap interval
    reaches zero). Each side needs ``MIN_SAMPLES`` successful requests.

    From logs (`infradoctor logs`): The p99 of successful requests an upstream answered (status below 500; failures
    are R006-R008's) is at least :data:`SLOW_P99_MS` (1 s) and the router's own time (request minus upstream, see
    R001) is at most :data:`ROUTER_SHARE_MAX` (10%) of it, with at least ``min_requests`` requests that log both
    times. When one or a few upstreams are the slow ones (p99 at least :data:`SLOW_UPSTREAM_FACTOR` (3) times the
    median p99 of the others, each with ``min_requests`` timed attempts), the finding names them; otherwise the
    backends are slow alike. Every percentile comes with the number of requests behind it.

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor route``) or ``logs``.
    - ``added_p50_ms``: the time the router adds at the median (ms), as R001 measures it.
    - ``added_p99_ms``: the same at p99 (ms).
    - ``requests``: the routed requests that measure rests on (as R001's).

    From the probe also: ``added_p50_ms_ci`` and ``added_p99_ms_ci`` (95% intervals), ``direct_p50_ms``,
    ``routed_p50_ms``, ``router_share_p50`` (the router's share of the routed median), ``slow_ms_threshold``
    (``--slow-ms``) and ``backends`` (each backend's direct p50 and p99).

    From logs also: ``success_p99_ms`` and ``success_n`` (successful requests), ``upstream_p99_ms`` and
    ``upstream_n``, ``slow_upstreams`` (the upstreams that stand out, each with its p50, p99 and ``n``) and
    ``others_median_p99_ms`` when some do.

Fix:
    Diagnose the backend directly: ``infradoctor load`` against one backend URL for latency under load,
    ``infradoctor profile`` for the model server, ``infradoctor node`` for the GPU and host; add replicas if it is
    overloaded, drain one that stays slower than the others.
"""

from __future__ import annotations

from statistics import median

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence, UpstreamStats, hist_quantile
from infradoctor.logs.incidents import LogsRuleOptions
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions, estimate

RULE = Rule(
    "R002",
    "backend-slow",
    Severity.MEDIUM,
    "Backends are slow; the router is not the problem",
    fix="Diagnose the backend (infradoctor profile/load against it directly).",
    risk="None from the router side.",
    commands=("route", "logs"),
)

MIN_SAMPLES = 20
"""Successful requests needed on each side."""

MAX_ROUTER_SHARE = 0.1
"""The router's added median must stay under this share of the routed median."""


@RULE.check(RouteEvidence, RuleOptions)
def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R002 when direct requests are slow and the router adds little."""
    att = evidence.attribution
    if att.routed_n < MIN_SAMPLES or att.direct_n < MIN_SAMPLES:
        return []
    if att.direct_p50_ms is None or att.routed_p50_ms is None or att.direct_p50_ms < options.slow_backend_ms:
        return []
    share = att.added_fraction_p50 or 0.0
    if att.added_p50.excludes_zero_above and share >= MAX_ROUTER_SHARE:
        return []
    slow = [
        {"backend": b.url, "direct_p50_ms": b.direct.p50.value, "direct_p99_ms": b.direct.p99.value}
        for b in evidence.backends
        if b.direct.p50.value is not None
    ]
    title = (
        f"Backends are slow: direct p50 {att.direct_p50_ms:.0f} ms vs routed {att.routed_p50_ms:.0f} ms; "
        f"the router adds {max(0.0, share) * 100:.0f}% of it"
    )
    return [
        RULE.finding(
            title,
            {
                "source": "probe",
                **estimate("added_p50_ms", att.added_p50),
                **estimate("added_p99_ms", att.added_p99),
                "requests": att.routed_n,
                "direct_p50_ms": att.direct_p50_ms,
                "routed_p50_ms": att.routed_p50_ms,
                "router_share_p50": round(share, 4),
                "slow_ms_threshold": options.slow_backend_ms,
                "backends": slow,
            },
            impact=max(0.0, min(1.0, 1.0 - share)),
        )
    ]


SLOW_P99_MS = 1000.0
"""Request p99 at or above which requests count as slow."""
ROUTER_SHARE_MAX = 0.1
"""The router's p99 time must be at most this share of the request p99."""


SLOW_UPSTREAM_FACTOR = 3.0
"""An upstream whose p99 is at least this many times the others' median p99 is named as the slow one."""


def slow_upstreams(evidence: LogsEvidence, options: LogsRuleOptions) -> list[UpstreamStats]:
    """The upstreams whose p99 stands out from the others' (slowest first); [] when none does or only one is."""
    pool = [u for u in evidence.upstreams if u.timed >= options.min_requests and u.p99_ms is not None]
    if len(pool) < 2:
        return []
    slow = []
    for upstream in pool:
        others = [u.p99_ms for u in pool if u is not upstream and u.p99_ms is not None]
        if upstream.p99_ms is not None and upstream.p99_ms >= SLOW_UPSTREAM_FACTOR * max(median(others), 1.0):
            slow.append(upstream)
    return sorted(slow, key=lambda u: -(u.p99_ms or 0.0)) if len(slow) < len(pool) else []


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """Slow requests whose time is upstream time, naming the slow upstream(s) when some stand out."""
    request_p99 = hist_quantile(evidence.success_hist, 0.99)
    router_p99 = evidence.overhead_p99_ms
    if request_p99 is None or router_p99 is None or evidence.overhead_samples < options.min_requests:
        return []
    if request_p99 < SLOW_P99_MS or router_p99 > ROUTER_SHARE_MAX * request_p99:
        return []
    slow = slow_upstreams(evidence, options)
    evidence_out: dict[str, object] = {
        "source": "logs", "added_p50_ms": evidence.overhead_p50_ms, "added_p99_ms": router_p99,
        "requests": evidence.overhead_samples, "success_p99_ms": request_p99, "success_n": evidence.success_n,
        "upstream_p99_ms": evidence.upstream_p99_ms, "upstream_n": evidence.upstream_latency_n,
        "slow_upstreams": [{"upstream": u.upstream, "p99_ms": u.p99_ms, "p50_ms": u.p50_ms, "n": u.timed}
                           for u in slow],
    }
    if slow:
        fast = [u.p99_ms for u in evidence.upstreams if u not in slow and u.p99_ms is not None]
        names = ", ".join(u.upstream for u in slow[:3])
        first = slow[0]
        evidence_out["others_median_p99_ms"] = median(fast) if fast else None
        title = (f"{names} {'is the slow upstream' if len(slow) == 1 else 'are the slow upstreams'}: p99 "
                 f"{first.p99_ms:.0f} ms (n={first.timed}) vs {median(fast) if fast else 0:.0f} ms for the others; "
                 f"the router adds only {router_p99:.0f} ms")
        return [RULE.finding(title, evidence_out,
                             fix=f"Diagnose {names} directly (infradoctor load against it, infradoctor node on its "
                                 "node); drain it or enable outlier detection if it stays slow.")]
    return [RULE.finding(
        f"Successful requests take {request_p99:.0f} ms at p99 (n={evidence.success_n}) and the router adds only "
        f"{router_p99:.0f} ms: the backends are slow", evidence_out)]
