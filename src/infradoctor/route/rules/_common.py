"""What several route rules share: options and the test for a backend that stands out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infradoctor.route.analysis import CONNECT_ERROR_CLASSES
from infradoctor.route.evidence import BackendStats, RouteEvidence
from infradoctor.route.stats import Estimate, two_proportion_greater

DEFAULT_SLOW_MS = 100.0
"""Direct median latency (ms) at or above which a backend counts as slow (``--slow-ms``)."""


DOWN_FRACTION = 0.9
"""A backend whose direct requests fail to connect this often is down."""

ERROR_RATE_MIN = 0.05
"""A backend's error rate must reach this to stand out ..."""

ERROR_RATE_MARGIN = 0.02
"""... and exceed twice the others' rate by this much ..."""

ERROR_P_VALUE = 0.01
"""... with a one-sided two-proportion p-value below this."""

LATENCY_RATIO = 2.0
"""A backend stands out by latency when its p50 CI lies above this multiple of every other backend's p50 CI ..."""

LATENCY_MARGIN_MS = 5.0
"""... and its median exceeds theirs by at least this much (ms)."""

MIN_REQUESTS = 10
"""Requests needed on a backend before it is judged."""


@dataclass(frozen=True)
class RuleOptions:
    """User-tunable thresholds of the route rules."""

    slow_backend_ms: float = DEFAULT_SLOW_MS
    """Direct median (ms) from which backends count as slow (R002)."""


def estimate(key: str, value: Estimate) -> dict[str, Any]:
    """An estimate as evidence: ``key`` its value (a number, as every source gives it).

    ``key_ci`` is its 95% interval ``[low, high]``.
    """
    out = value.to_dict()
    return {key: out["value"], f"{key}_ci": [out["ci_low"], out["ci_high"]]}


def requests_and_errors(backend: BackendStats) -> tuple[int, int]:
    """Requests that reached or tried this backend and how many failed.

    Direct requests, routed ones it served, and routed attempts on it that the router retried elsewhere.
    """
    requests = backend.direct.requests + backend.served + backend.failed_attempts
    return requests, backend.direct.error_count + backend.routed_errors + backend.failed_attempts


def is_down(backend: BackendStats) -> bool:
    """True when nearly every direct request failed to connect."""
    direct = backend.direct
    connect_failures = sum(n for cls, n in direct.errors.items() if cls in CONNECT_ERROR_CLASSES)
    return direct.requests >= 1 and connect_failures >= DOWN_FRACTION * direct.requests


def error_standout(evidence: RouteEvidence, backend: BackendStats) -> float | None:
    """The p-value when this backend's error rate stands out from the others', else None."""
    requests, errors = requests_and_errors(backend)
    if requests < MIN_REQUESTS:
        return None
    others = [b for b in evidence.backends if b.url != backend.url]
    other_requests = sum(requests_and_errors(b)[0] for b in others)
    other_errors = sum(requests_and_errors(b)[1] for b in others)
    rate = errors / requests
    other_rate = other_errors / other_requests if other_requests else 0.0
    if rate < ERROR_RATE_MIN or rate < 2 * other_rate + ERROR_RATE_MARGIN:
        return None
    if not others or other_requests == 0:
        return 0.0 if rate >= 0.5 else None  # alone: only a clearly failing backend is judged
    p_value = two_proportion_greater(errors, requests, other_errors, other_requests)
    return p_value if p_value is not None and p_value < ERROR_P_VALUE else None


def latency_standout(evidence: RouteEvidence, backend: BackendStats) -> float | None:
    """How many times slower (p50) this backend is than the fastest other one, when that stands out; else None."""
    mine = backend.direct.p50
    if mine.value is None or mine.low is None or backend.direct.ok < MIN_REQUESTS:
        return None
    others = [b.direct.p50 for b in evidence.backends if b.url != backend.url and b.direct.ok >= MIN_REQUESTS]
    others = [p for p in others if p.value is not None and p.high is not None]
    if not others:
        return None
    highest_other = max(p.high or 0.0 for p in others)
    typical_other = sorted(p.value or 0.0 for p in others)[len(others) // 2]
    if mine.low < LATENCY_RATIO * highest_other or mine.value - typical_other < LATENCY_MARGIN_MS:
        return None
    return mine.value / typical_other if typical_other > 0 else float("inf")


def unhealthy(evidence: RouteEvidence, backend: BackendStats) -> bool:
    """True when the backend is down or its error rate stands out (what R003 reports on errors)."""
    return is_down(backend) or error_standout(evidence, backend) is not None
