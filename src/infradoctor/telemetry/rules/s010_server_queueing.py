"""S010 server-queueing: client latency rises because requests wait in the model server's own queue.

What it detects:
    Point by point of a sweep, the model server's waiting queue (vLLM ``vllm:num_requests_waiting``, SGLang
    ``sglang:num_queue_reqs``, TGI ``tgi_queue_size``, Triton ``nv_inference_pending_request_count``, Ray Serve
    ``ray_serve_deployment_queued_queries``) fills while the client's p99 (TTFT when streamed) rises, or the
    server's own queue time (``vllm:request_queue_time_seconds``, TGI ``tgi_request_queue_duration``, Triton
    ``nv_inference_queue_duration_us``, TorchServe ``ts_queue_latency_microseconds``) is a large share of what the
    client waits.

Why it matters:
    Load tools report the client's latency and dashboards the server's gauges; neither says the latency *is* the
    queue. Once requests queue in the server, more client concurrency only lengthens the queue: the server is at
    its batch or memory limit, and the fix is capacity or admission, not a faster network or router.

How it is measured:
    The first point whose waiting queue reaches ``QUEUE_MIN`` while the client's p99 is at least
    ``LATENCY_GROWTH`` times the first point's, or whose mean server queue time is at least ``QUEUE_SHARE`` of
    the client's p50 while requests do wait (a queue time with an empty waiting queue is the batcher's own wait,
    not queueing). The title names the rise, the queue at that point, and KV-cache usage and preemptions
    there when they also crossed their thresholds (S011, S012).

Fix:
    Add replicas or GPU capacity; raise the batch limits the server allows where memory permits (vLLM
    ``--max-num-seqs``, ``--max-num-batched-tokens``; TGI ``--max-batch-total-tokens``; Triton dynamic batching
    ``max_queue_delay_microseconds``, instance count); shed load at the router with a concurrency limit and 429s
    instead of queueing without bound.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.telemetry.evidence import ServerEvidence
from infradoctor.telemetry.rules._common import LATENCY_GROWTH, baseline, point_facts, rise, where

RULE = Rule(
    "S010",
    "server-queueing",
    Severity.HIGH,
    "Requests queue inside the model server",
    fix="Add replicas/GPU capacity or raise the server's batch limits; shed load with a concurrency limit and 429s.",
    risk="Larger batches raise per-request latency and memory use.",
    commands=("load", "route"),
)

QUEUE_MIN = 2.0
"""Waiting requests from which the server's queue counts as filled."""

QUEUE_SHARE = 0.3
"""Server queue time's share of the client's p50 from which queueing explains the latency."""

KV_HIGH = 0.95
"""KV-cache usage named in the title alongside (S011's threshold)."""


@RULE.check(ServerEvidence)
def check(evidence: ServerEvidence, options: object) -> list[Finding]:
    """S010 at the first point where the server's queue explains the client's latency."""
    base = baseline(evidence)
    for point in evidence.points:
        s = point.server
        queued = s.waiting_max is not None and s.waiting_max >= QUEUE_MIN
        grew = bool(rise(evidence, point))
        queue_share = (s.queue_time_ms / point.client_p50_ms if s.queue_time_ms is not None and point.client_p50_ms
                       else None)
        # A queue time that dominates the p50 while no request waits (c=1: the batcher's own wait) is not queueing.
        waited = s.waiting_max is None or queued
        if not ((queued and (grew or len(evidence.points) == 1)) or (waited and (queue_share or 0.0) >= QUEUE_SHARE)):
            continue
        clauses = []
        if s.waiting_max is not None:
            clauses.append(f"the waiting queue reached {s.waiting_max:.0f}")
        if s.kv_cache_usage_max is not None and s.kv_cache_usage_max >= KV_HIGH:
            clauses.append(f"KV-cache usage reached {s.kv_cache_usage_max:.0%}")
        head = rise(evidence, point) or f"{point.latency_name} {point.latency_p99_ms or 0:.0f} ms"
        title = f"{head} when " + " and ".join(clauses or ["requests queued in the server"]) + f" ({where(point)})"
        if queue_share is not None:
            title += f"; server queue time {s.queue_time_ms:.0f} ms of a {point.client_p50_ms:.0f} ms p50"
        first_preempt = next((p for p in evidence.points if (p.server.preemptions or 0) > 0), None)
        if first_preempt is not None:
            title += f"; preemptions started at {where(first_preempt)}"
        facts = point_facts(point)
        return [RULE.finding(
            title,
            {"server": evidence.source, "kind": evidence.kind, **facts,
             "baseline_point": base.label if base else None,
             "baseline_p99_ms": base.latency_p99_ms if base else None, "latency_growth": LATENCY_GROWTH,
             "queue_share_of_p50": None if queue_share is None else round(queue_share, 3),
             "metric": point.server.names.get("waiting")},
            impact=min(1.0, queue_share) if queue_share is not None else None,
        )]
    return []
