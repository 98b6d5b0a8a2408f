"""What the model-server rules share: the baseline point and how a point is named."""

from __future__ import annotations

from infradoctor.telemetry.evidence import ServerEvidence, ServerPoint

LATENCY_GROWTH = 2.0
"""A point's client p99 (TTFT where streamed) at this multiple of the first point's counts as a rise."""


def baseline(evidence: ServerEvidence) -> ServerPoint | None:
    """The first point with a client latency: the reference the rise is measured from."""
    return next((p for p in evidence.points if p.latency_p99_ms is not None), None)


def where(point: ServerPoint) -> str:
    """``concurrency 32`` or ``50 requests/s`` or the point's label."""
    if point.concurrency is not None:
        return f"concurrency {point.concurrency}"
    if point.rate is not None:
        return f"{point.rate:g} requests/s"
    return "during the run" if point.label == "run" else point.label


def rise(evidence: ServerEvidence, point: ServerPoint) -> str:
    """``p99 TTFT rose from 80 to 900 ms`` between the baseline and ``point`` (empty without a rise)."""
    base = baseline(evidence)
    if base is None or base is point or base.latency_p99_ms is None or point.latency_p99_ms is None:
        return ""
    if point.latency_p99_ms < LATENCY_GROWTH * base.latency_p99_ms:
        return ""
    return f"{point.latency_name} rose from {base.latency_p99_ms:.0f} to {point.latency_p99_ms:.0f} ms"


def point_facts(point: ServerPoint) -> dict[str, object]:
    """A point's numbers for a finding's evidence."""
    s = point.server
    return {"point": point.label, "concurrency": point.concurrency, "rate": point.rate,
            "client_p50_ms": point.client_p50_ms, "client_p99_ms": point.client_p99_ms,
            "client_ttft_p99_ms": point.client_ttft_p99_ms, "waiting_max": s.waiting_max,
            "waiting_mean": s.waiting_mean, "running_max": s.running_max, "running_mean": s.running_mean,
            "kv_cache_usage_max": s.kv_cache_usage_max, "preemptions": s.preemptions,
            "server_queue_time_ms": s.queue_time_ms, "server_ttft_ms": s.ttft_ms,
            "batch_size_mean": s.batch_size_mean}
