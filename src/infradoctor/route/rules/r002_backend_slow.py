"""R002 backend-slow: requests are slow straight to the backends too; the router is not the problem.

What it detects:
    Routed requests are slow, and the same requests sent directly to the backends (interleaved in time) are just
    as slow: the router adds little of the latency.

Why it matters:
    Routers are often blamed for slow AI endpoints. When direct requests are as slow as routed ones, tuning or
    replacing the router cannot help; the time is spent in the model server or the node.

How it is measured:
    The pooled direct median must reach ``--slow-ms`` (default ``DEFAULT_SLOW_MS``), and the router's added
    median must be under ``MAX_ROUTER_SHARE`` of the routed median or not significant (its 95% bootstrap interval
    reaches zero). Each side needs ``MIN_SAMPLES`` successful requests.

Fix:
    Diagnose the backend directly: ``infradoctor load`` against one backend URL for latency under load,
    ``infradoctor profile`` for the model server, ``infradoctor node`` for the GPU and host.
"""

from __future__ import annotations

from infradoctor.findings import Finding, make_finding
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions

CODE = "R002"

MIN_SAMPLES = 20
"""Successful requests needed on each side."""

MAX_ROUTER_SHARE = 0.1
"""The router's added median must stay under this share of the routed median."""


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
        make_finding(
            CODE,
            title,
            {
                "direct_p50_ms": att.direct_p50_ms,
                "routed_p50_ms": att.routed_p50_ms,
                "added_p50_ms": att.added_p50.to_dict(),
                "router_share_p50": round(share, 4),
                "slow_ms_threshold": options.slow_backend_ms,
                "backends": slow,
            },
            impact=max(0.0, min(1.0, 1.0 - share)),
        )
    ]
