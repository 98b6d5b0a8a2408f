"""S011 kv-cache-pressure: the model server's KV cache is (nearly) full under the load.

What it detects:
    A point of the sweep where the server's KV-cache usage (vLLM V1 ``vllm:kv_cache_usage_perc``, V0
    ``vllm:gpu_cache_usage_perc``; SGLang ``sglang:token_usage``; TGI the running batch's tokens over
    ``tgi_batch_max_total_tokens``) reaches ``KV_HIGH``.

Why it matters:
    A full KV cache caps the running batch: new requests wait (S010) and running ones are preempted and
    recomputed (S012), so latency grows with load while throughput stops growing. More clients cannot help.

How it is measured:
    The largest usage reading within each point; the first point at or above ``KV_HIGH`` is reported with the
    client's latency there and at the first point.

Fix:
    Give the cache more memory (vLLM ``--gpu-memory-utilization``, a smaller ``--max-model-len``, FP8 KV cache
    ``--kv-cache-dtype fp8``), use prefix caching for shared prompts, cap concurrent sequences (``--max-num-seqs``)
    so requests queue instead of thrashing, or add replicas.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.telemetry.evidence import ServerEvidence
from infradoctor.telemetry.rules._common import point_facts, rise, where

RULE = Rule(
    "S011",
    "kv-cache-pressure",
    Severity.HIGH,
    "The model server's KV cache is full",
    fix="Give the KV cache more memory (gpu-memory-utilization, shorter max-model-len, fp8 KV), or cap sequences.",
    risk="More KV memory leaves less for activations; shorter contexts refuse long prompts.",
    commands=("load", "route"),
)

KV_HIGH = 0.95
"""KV-cache usage (0-1) from which the cache counts as full."""


@RULE.check(ServerEvidence)
def check(evidence: ServerEvidence, options: object) -> list[Finding]:
    """S011 at the first point where KV-cache usage reaches the threshold."""
    for point in evidence.points:
        usage = point.server.kv_cache_usage_max
        if usage is None or usage < KV_HIGH:
            continue
        grew = rise(evidence, point)
        title = f"KV-cache usage reached {usage:.0%} at {where(point)}" + (f": {grew}" if grew else "")
        return [RULE.finding(title, {"server": evidence.source, "kind": evidence.kind, **point_facts(point),
                                     "metric": point.server.names.get("kv_cache_usage"), "threshold": KV_HIGH})]
    return []
