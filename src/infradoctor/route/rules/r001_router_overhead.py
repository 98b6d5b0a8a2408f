"""R001 router-overhead: the router itself adds significant latency.

What it detects:
    Requests through the router are slower than the same requests sent straight to the backends, interleaved in
    time, by a margin that is both statistically significant and material: at the median, or at the tail (p99).

Why it matters:
    When routed latency is high, the backends are usually blamed and scaled. If the time is spent in the router
    (its CPU, connection setup per request, buffering, queueing for an upstream connection), more backends will
    not help.

How it is measured:
    Router-added latency = routed quantile minus direct quantile (backends pooled), with a seeded 95% bootstrap
    interval. It is reported at p50 when the interval's lower end is above zero and the estimate is at least
    ``MIN_ADDED_MS`` and ``MIN_ADDED_FRACTION`` of the direct median; at p99 when the interval's lower end itself
    is at least ``TAIL_MIN_ADDED_MS`` and ``TAIL_MIN_FRACTION`` of the direct p99 (the tail is decided by a few
    samples), with ``TAIL_MIN_SAMPLES`` routed requests. Each side needs ``MIN_SAMPLES`` successful requests.
    When the pooled comparison shows nothing, the same test runs per backend (routed requests it served against
    direct ones to it), which finds a slow hop from the router to one node. The difference includes the extra
    network hop through the router; run the probe from a host on the same
    network as the router and the backends (the TCP connect times in ``metrics.network`` show each hop's cost).

Fix:
    Scale the router (more workers/replicas, CPU), enable upstream keep-alive and connection pooling (nginx
    ``keepalive`` in the upstream block with ``proxy_http_version 1.1``), check proxy buffering and any filters,
    rate limits or auth calls the router makes per request.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Severity, make_finding
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions

CODE = "R001"

MIN_SAMPLES = 20
"""Successful requests needed on each side."""

MIN_ADDED_MS = 2.0
"""Smallest router-added median (ms) worth reporting."""

MIN_ADDED_FRACTION = 0.2
"""... and its smallest share of the direct median."""

TAIL_MIN_ADDED_MS = 10.0
"""Smallest router-added p99 (ms) worth reporting."""

TAIL_MIN_FRACTION = 0.5
"""... and its smallest share of the direct p99."""

TAIL_MIN_SAMPLES = 200
"""Successful routed requests needed before the p99 is judged."""


def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R001 when the router adds significant latency at p50 or p99."""
    att = evidence.attribution
    if att.routed_n < MIN_SAMPLES or att.direct_n < MIN_SAMPLES or att.direct_p50_ms is None:
        return []
    direct_p99 = att.direct_p99_ms or 0.0
    median = att.added_p50
    tail = att.added_p99
    median_hit = (
        median.value is not None
        and median.excludes_zero_above
        and median.value >= max(MIN_ADDED_MS, MIN_ADDED_FRACTION * att.direct_p50_ms)
    )
    # The tail is noisy (a few samples decide it), so its whole interval must clear the threshold.
    tail_hit = (
        att.routed_n >= TAIL_MIN_SAMPLES
        and tail.low is not None
        and tail.low >= max(TAIL_MIN_ADDED_MS, TAIL_MIN_FRACTION * direct_p99)
    )
    if not (median_hit or tail_hit):
        return _per_backend(evidence)
    evidence_out = {
        "router": evidence.router_url,
        "added_p50_ms": median.to_dict(),
        "added_p99_ms": tail.to_dict(),
        "routed_p50_ms": att.routed_p50_ms,
        "direct_p50_ms": att.direct_p50_ms,
        "routed_p99_ms": att.routed_p99_ms,
        "direct_p99_ms": att.direct_p99_ms,
        "added_fraction_p50": att.added_fraction_p50,
        "p_value": att.p_value,
        "routed_n": att.routed_n,
        "direct_n": att.direct_n,
        "per_backend_added_p50_ms": {b.backend: b.added_p50.value for b in att.per_backend},
    }
    if median_hit:
        assert median.value is not None and median.low is not None and median.high is not None
        title = (
            f"The router adds {median.value:.1f} ms at p50 (95% CI {median.low:.1f}-{median.high:.1f}): "
            f"routed {att.routed_p50_ms:.1f} ms vs direct {att.direct_p50_ms:.1f} ms"
        )
        severity = Severity.HIGH
    else:
        assert tail.value is not None and tail.low is not None and tail.high is not None
        title = (
            f"The router adds {tail.value:.1f} ms at p99 (95% CI {tail.low:.1f}-{tail.high:.1f}): "
            f"routed {att.routed_p99_ms or 0:.1f} ms vs direct {direct_p99:.1f} ms"
        )
        severity = Severity.MEDIUM
    return [
        make_finding(
            CODE, title, evidence_out, severity=severity, impact=max(0.0, min(1.0, att.added_fraction_p50 or 0.0))
        )
    ]


def _per_backend(evidence: RouteEvidence) -> list[Finding]:
    """R001 for one backend's routed path when the pooled comparison hides it (e.g. a slow router-to-node hop)."""
    findings: list[Finding] = []
    for entry in evidence.attribution.per_backend:
        backend = evidence.backend(entry.backend)
        added = entry.added_p50
        direct_p50 = backend.direct.p50.value if backend is not None else None
        if entry.routed_n < MIN_SAMPLES or entry.direct_n < MIN_SAMPLES or direct_p50 is None:
            continue
        if added.value is None or added.low is None or added.high is None or not added.excludes_zero_above:
            continue
        if added.value < max(MIN_ADDED_MS, MIN_ADDED_FRACTION * direct_p50):
            continue
        findings.append(
            make_finding(
                CODE,
                f"Through the router, requests to {entry.backend} take {added.value:.1f} ms longer at p50 "
                f"(95% CI {added.low:.1f}-{added.high:.1f}) than sent to it directly",
                {
                    "router": evidence.router_url,
                    "backend": entry.backend,
                    "added_p50_ms": added.to_dict(),
                    "direct_p50_ms": direct_p50,
                    "routed_n": entry.routed_n,
                    "direct_n": entry.direct_n,
                },
                severity=Severity.MEDIUM,
            )
        )
    return findings
