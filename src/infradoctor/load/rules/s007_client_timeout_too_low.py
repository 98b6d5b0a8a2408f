"""S007 client-timeout-too-low: the client timeout is below the service's tail latency.

What it detects:
    Read timeouts on at least ``MIN_TIMEOUT_RATE`` (0.5%) of requests at a load the service otherwise handles: at
    or below the knee (every point when there is no knee), so the timeouts come from the service's normal tail,
    not from overload.

Why it matters:
    A request that times out has cost the server its full work and the client gets nothing; retries on timeout
    then multiply the load. When the timeout sits inside the service's latency distribution, a share of users
    fails at any load.

How it is measured:
    Read timeouts per point (the request was sent and the response did not complete within ``timeout_s``; those
    requests are kept in the latency histogram at the timeout). The finding names the lowest such point, the
    timeout and the slowest successful response.

Fix:
    Raise the client timeout above the service's p99 (p99.9 for retried calls) at the expected load, or find and
    remove the slow tail (stalls, GC pauses, cold caches) on the server.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, make_finding
from infradoctor.load.evidence import LoadEvidence

CODE = "S007"
MIN_TIMEOUT_RATE = 0.005
"""Read timeouts on at least this share of requests at a non-overloaded point."""


def check(evidence: LoadEvidence, options: Mapping[str, Any] | None = None) -> list[Finding]:
    """S007 when read timeouts occur below the knee."""
    points = evidence.valid_points
    if evidence.knee:
        limit = float(evidence.knee.get("level", math.inf))
        points = [p for p in points if p.level <= limit]
    hits = [p for p in points if p.completed and p.read_timeouts / p.completed >= MIN_TIMEOUT_RATE]
    if not hits:
        return []
    point = min(hits, key=lambda p: p.level)
    rate = point.read_timeouts / point.completed
    timeout_text = f"{evidence.timeout_s:g} s" if math.isfinite(evidence.timeout_s) else "the timeout"
    return [
        make_finding(
            CODE,
            f"{rate:.1%} of requests hit the {timeout_text} client timeout at {point.label}, below the knee",
            {
                "point": point.label,
                "timeout_s": evidence.timeout_s if math.isfinite(evidence.timeout_s) else None,
                "read_timeouts": point.read_timeouts,
                "read_timeout_rate": round(rate, 5),
                "ok_max_ms": round(point.ok_max_ms, 3) if math.isfinite(point.ok_max_ms) else None,
                "p99_ms": round(point.p99_ms, 3),
            },
        )
    ]
