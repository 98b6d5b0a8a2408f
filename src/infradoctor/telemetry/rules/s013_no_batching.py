"""S013 no-batching: under concurrent load the model server runs one request at a time.

What it detects:
    Points where the client keeps at least ``MIN_CONCURRENCY`` requests in flight (open loop: the server's queue
    holds at least one request on average) while the server's running batch never exceeds one request (vLLM
    ``vllm:num_requests_running``, SGLang ``sglang:num_running_reqs``, TGI ``tgi_batch_current_size``) or Triton
    executes about one inference per model execution (``nv_inference_count`` / ``nv_inference_exec_count`` at most
    ``MAX_BATCH``).

Why it matters:
    Batching is how a GPU serves many requests at the cost of one; a server that runs them one by one turns
    concurrency into queueing and leaves most of the accelerator idle.

How it is measured:
    Per point: the running batch's largest reading, or Triton's batch items per execution over the point, with at
    least ``MIN_REQUESTS`` requests finished by the server (where it counts them).

Fix:
    Enable batching: Triton ``dynamic_batching`` with a ``max_queue_delay_microseconds`` and ``max_batch_size`` > 1;
    TorchServe ``batch_size``/``max_batch_delay``; for vLLM/TGI check ``--max-num-seqs`` /
    ``--max-batch-size`` (and that a proxy in front does not serialise requests).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.telemetry.evidence import ServerEvidence
from infradoctor.telemetry.rules._common import point_facts, where

RULE = Rule(
    "S013",
    "no-batching",
    Severity.MEDIUM,
    "The model server does not batch concurrent requests",
    fix="Enable batching (Triton dynamic_batching, TorchServe batch_size, vLLM/TGI max-num-seqs / max-batch-size).",
    risk="Batching adds up to the batch delay to each request's latency.",
    commands=("load", "route"),
)

MIN_CONCURRENCY = 4
"""Client requests in flight from which a server should batch."""

MAX_BATCH = 1.1
"""Mean requests per execution (or the largest running batch) at or below which nothing is batched."""

MIN_REQUESTS = 10
"""Requests the server finished in the point (where it counts them)."""


@RULE.check(ServerEvidence)
def check(evidence: ServerEvidence, options: object) -> list[Finding]:
    """S013 at the most loaded point that shows no batching."""
    hits = []
    for point in evidence.points:
        s = point.server
        # a closed-loop point is loaded by its client count; otherwise by a queue that stays (a read may catch one
        # request waiting for the next scheduler step even at one client)
        loaded = point.concurrency >= MIN_CONCURRENCY if point.concurrency is not None else \
            (s.waiting_mean or 0.0) >= 1.0
        if not loaded or (s.requests_finished is not None and s.requests_finished < MIN_REQUESTS):
            continue
        batch = s.batch_size_mean if s.batch_size_mean is not None else s.running_max
        if batch is None or batch > MAX_BATCH:
            continue
        hits.append((point, batch))
    if not hits:
        return []
    point, batch = hits[-1]
    what = "batch items per execution" if point.server.batch_size_mean is not None else "its running batch peaked at"
    waited = point.server.waiting_max
    title = (f"The server ran one request at a time at {where(point)}: {what} {batch:.2f}"
             + (f" while up to {waited:.0f} waited" if waited else ""))
    return [RULE.finding(title, {"server": evidence.source, "kind": evidence.kind, **point_facts(point),
                                 "points_without_batching": [p.label for p, _ in hits]})]
