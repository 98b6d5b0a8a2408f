"""R004 uneven-distribution: the router spreads requests unevenly across backends.

What it detects:
    Routed requests, attributed to backends by an upstream response header, are not spread in the expected
    shares (equal, or ``--weights``), among the backends that are healthy.

Why it matters:
    An overloaded backend sets the tail latency of the whole service while others idle. Typical causes: long-lived
    keep-alive or HTTP/2 connections pinned to one backend, per-worker round-robin in the router, hashing on a
    skewed key, or weights left over from a migration.

How it is measured:
    Pearson's chi-square goodness-of-fit of served counts against the expected shares, over backends that are
    neither down nor failing (R003 reports those, and a router rightly sends them less). Reported when the
    p-value is below ``P_VALUE``, some backend's share is off by at least ``MIN_DEVIATION`` (relative), and at
    least ``MIN_ATTRIBUTED`` requests were attributed. The header is auto-detected (``X-Upstream-Addr``,
    ``X-Served-By``, ``X-Backend``, ``x-envoy-upstream-host``) or named with ``--backend-header``.

Fix:
    Use least-request / power-of-two-choices balancing (nginx ``least_conn`` or ``random two least_conn``,
    HAProxy ``balance leastconn``, Envoy ``LEAST_REQUEST``), recycle long-lived connections, check ``--weights``
    against the intended capacity of each backend.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions, unhealthy
from infradoctor.route.stats import chi_square_goodness_of_fit

RULE = Rule(
    "R004",
    "uneven-distribution",
    Severity.MEDIUM,
    "Requests are unevenly distributed across backends",
    fix="Use least-request / power-of-two-choices balancing, recycle long-lived keep-alive connections.",
    risk="Least-request needs accurate in-flight counts at the router.",
    commands=("route",),
)

P_VALUE = 0.001
"""Chi-square p-value below which the spread is not the expected one."""

MIN_DEVIATION = 0.25
"""Smallest relative deviation of one backend's share that matters (0.25: 25% more or less than expected)."""

MIN_ATTRIBUTED = 50
"""Attributed routed requests needed."""


@RULE.check(RouteEvidence, RuleOptions)
def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R004 when healthy backends get significantly uneven shares."""
    dist = evidence.distribution
    healthy = [b.url for b in evidence.backends if not unhealthy(evidence, b)]
    if len(healthy) < 2:
        return []
    counts = [dist.counts.get(url, 0) for url in healthy]
    total = sum(counts)
    if total < MIN_ATTRIBUTED:
        return []
    share_total = sum(dist.expected_shares.get(url, 0.0) for url in healthy)
    if share_total <= 0:
        return []
    expected = [dist.expected_shares.get(url, 0.0) / share_total for url in healthy]
    chi2, df, p_value = chi_square_goodness_of_fit(counts, expected)
    deviations = {
        url: (count / total - exp) / exp for url, count, exp in zip(healthy, counts, expected, strict=True) if exp > 0
    }
    worst_url = max(deviations, key=lambda u: abs(deviations[u]))
    worst = deviations[worst_url]
    if p_value >= P_VALUE or abs(worst) < MIN_DEVIATION:
        return []
    shares = {url: round(count / total, 4) for url, count in zip(healthy, counts, strict=True)}
    expected_map = {url: round(exp, 4) for url, exp in zip(healthy, expected, strict=True)}
    title = (
        f"Uneven distribution: {worst_url} got {shares[worst_url]:.0%} of routed requests, "
        f"expected {expected_map[worst_url]:.0%} ({dist.weights_source})"
    )
    return [
        RULE.finding(
            title,
            {
                "header": dist.header,
                "counts": dict(zip(healthy, counts, strict=True)),
                "shares": shares,
                "expected_shares": expected_map,
                "weights_source": dist.weights_source,
                "chi_square": round(chi2, 3),
                "df": df,
                "p_value": float(f"{p_value:.3g}"),
                "max_deviation": round(worst, 4),
                "most_deviant": worst_url,
            },
            impact=min(1.0, abs(worst) * expected_map[worst_url]),
        )
    ]
