"""Model servers' own metrics, read from their Prometheus endpoints.

Servers: vLLM, SGLang, TGI, Triton, TorchServe, Ray Serve and infradoctor's middleware.

Each read becomes a :class:`ServerSnapshot` of canonical values: ``waiting`` (the server's request queue),
``running`` (requests in the running batch), ``kv_cache_usage`` (0-1), ``preemptions`` (counter), queue-time and
first-token sums and counts (counters of histograms), batch items and executions (Triton), finished requests.
Names per server and version come from tests/corpus/metrics/NAMES.md (recordings and sources listed there):
vLLM V1 ``vllm:kv_cache_usage_perc`` is read before V0's ``vllm:gpu_cache_usage_perc`` (deprecated by vLLM
#18354, removed by #29330); both are fractions 0-1 despite "perc". Extra labels (``engine``, ``model_name``) are
summed over; gauges of several models are summed too (one server, one queue per model).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from infradoctor.telemetry import prometheus

SERVER_COUNTERS = frozenset({
    "preemptions", "queue_time_s_sum", "queue_time_s_count", "ttft_s_sum", "ttft_s_count", "requests_finished",
    "batch_items", "batch_executions", "request_time_s_sum", "request_time_s_count", "generation_tokens",
})
"""Canonical counters of a model server."""

SERVER_GAUGES = frozenset({"waiting", "running", "kv_cache_usage", "batch_size"})
"""Canonical gauges of a model server."""


@dataclass(frozen=True)
class Source:
    """Where one canonical value comes from for one server kind: metric names in order of preference."""

    names: tuple[str, ...]
    scale: float = 1.0
    reducer: str = "sum"


# Order of preference per canonical value; the first name present in the exposition wins.
KINDS: Mapping[str, Mapping[str, Source]] = {
    "vllm": {
        "waiting": Source(("vllm:num_requests_waiting",)),
        "running": Source(("vllm:num_requests_running",)),
        "kv_cache_usage": Source(("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), reducer="max"),
        "preemptions": Source(("vllm:num_preemptions_total", "vllm:num_preemptions")),
        "queue_time_s_sum": Source(("vllm:request_queue_time_seconds_sum",)),
        "queue_time_s_count": Source(("vllm:request_queue_time_seconds_count",)),
        "ttft_s_sum": Source(("vllm:time_to_first_token_seconds_sum",)),
        "ttft_s_count": Source(("vllm:time_to_first_token_seconds_count",)),
        "request_time_s_sum": Source(("vllm:e2e_request_latency_seconds_sum",)),
        "request_time_s_count": Source(("vllm:e2e_request_latency_seconds_count",)),
        "requests_finished": Source(("vllm:request_success_total",)),
        "generation_tokens": Source(("vllm:generation_tokens_total",)),
    },
    "sglang": {
        "waiting": Source(("sglang:num_queue_reqs",)),
        "running": Source(("sglang:num_running_reqs",)),
        "kv_cache_usage": Source(("sglang:token_usage",), reducer="max"),
        "ttft_s_sum": Source(("sglang:time_to_first_token_seconds_sum",)),
        "ttft_s_count": Source(("sglang:time_to_first_token_seconds_count",)),
        "request_time_s_sum": Source(("sglang:e2e_request_latency_seconds_sum",)),
        "request_time_s_count": Source(("sglang:e2e_request_latency_seconds_count",)),
        "generation_tokens": Source(("sglang:generation_tokens_total",)),
    },
    "tgi": {
        "waiting": Source(("tgi_queue_size",)),
        "running": Source(("tgi_batch_current_size",)),
        "queue_time_s_sum": Source(("tgi_request_queue_duration_sum",)),
        "queue_time_s_count": Source(("tgi_request_queue_duration_count",)),
        "request_time_s_sum": Source(("tgi_request_duration_sum",)),
        "request_time_s_count": Source(("tgi_request_duration_count",)),
        "requests_finished": Source(("tgi_request_success",)),
    },
    "triton": {
        "waiting": Source(("nv_inference_pending_request_count",)),
        "queue_time_s_sum": Source(("nv_inference_queue_duration_us",), scale=1e-6),
        "request_time_s_sum": Source(("nv_inference_request_duration_us",), scale=1e-6),
        "requests_finished": Source(("nv_inference_request_success",)),
        "batch_items": Source(("nv_inference_count",)),
        "batch_executions": Source(("nv_inference_exec_count",)),
    },
    "torchserve": {
        "queue_time_s_sum": Source(("ts_queue_latency_microseconds",), scale=1e-6),
        "request_time_s_sum": Source(("ts_inference_latency_microseconds",), scale=1e-6),
        "requests_finished": Source(("ts_inference_requests_total",)),
    },
    "ray": {
        "waiting": Source(("ray_serve_deployment_queued_queries",)),
        "running": Source(("ray_serve_num_ongoing_requests_at_replicas", "ray_serve_replica_processing_queries")),
        "requests_finished": Source(("ray_serve_num_router_requests_total",
                                        "ray_serve_deployment_request_counter_total")),
    },
    "infradoctor": {
        "running": Source(("infradoctor_requests_in_flight",)),
        "request_time_s_sum": Source(("infradoctor_request_duration_seconds_sum",)),
        "request_time_s_count": Source(("infradoctor_request_duration_seconds_count",)),
    },
}
"""Canonical value -> metric names per server kind."""

_PREFIXES = (("vllm:", "vllm"), ("sglang:", "sglang"), ("tgi_", "tgi"), ("nv_inference_", "triton"),
             ("ts_", "torchserve"), ("ray_serve_", "ray"), ("infradoctor_request", "infradoctor"))

_PREFIX_TUPLE = tuple(prefix for prefix, _ in _PREFIXES)


@dataclass(frozen=True)
class ServerSnapshot:
    """One read of a model server's metrics."""

    kind: str
    """``vllm``, ``sglang``, ``tgi``, ``triton``, ``torchserve``, ``ray``, ``infradoctor`` or ``unknown``."""
    source: str
    """The URL (or file) read."""
    values: Mapping[str, float] = field(default_factory=dict)
    """Canonical values present (:data:`SERVER_COUNTERS`, :data:`SERVER_GAUGES`)."""
    names: Mapping[str, str] = field(default_factory=dict)
    """Canonical value -> the metric name it was read from (``kv_cache_usage`` -> ``vllm:gpu_cache_usage_perc``)."""
    problem: str | None = None
    """Why (part of) the answer could not be read, or None."""


def detect_kind(expo: prometheus.Exposition) -> str:
    """The server kind whose names the exposition carries most of."""
    counts: dict[str, int] = {}
    for name in expo.names():
        for prefix, kind in _PREFIXES:
            if name.startswith(prefix):
                counts[kind] = counts.get(kind, 0) + 1
                break
    return max(counts, key=lambda k: counts[k]) if counts else "unknown"


def parse_server_metrics(body: bytes | str, source: str = "") -> ServerSnapshot:
    """A model server's ``/metrics`` answer as canonical values; never raises."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    if not prometheus.looks_like(text):
        return ServerSnapshot("unknown", source, problem="the answer is not a Prometheus exposition")
    expo = prometheus.parse(text, prefixes=_PREFIX_TUPLE, buckets=False)
    kind = detect_kind(expo)
    if kind == "unknown":
        return ServerSnapshot(kind, source, problem="no known model-server metric names in the answer")
    values: dict[str, float] = {}
    names: dict[str, str] = {}
    for key, mapping in KINDS[kind].items():
        name = expo.first(*mapping.names)
        if name is None:
            continue
        samples = [s.value for s in expo.get(name)]
        value = max(samples) if mapping.reducer == "max" else sum(samples)
        values[key] = value * mapping.scale
        names[key] = name
    if kind in ("triton", "torchserve") and "requests_finished" in values:
        for prefix in ("queue_time_s", "request_time_s"):
            if f"{prefix}_sum" in values:
                failures = expo.total("nv_inference_request_failure") or 0.0 if kind == "triton" else 0.0
                values[f"{prefix}_count"] = values["requests_finished"] + failures
    if kind == "tgi":
        current = expo.total("tgi_batch_current_max_tokens")
        budget = expo.total("tgi_batch_max_total_tokens")
        if current is not None and budget:
            values["kv_cache_usage"] = min(1.0, current / budget)
            names["kv_cache_usage"] = "tgi_batch_current_max_tokens / tgi_batch_max_total_tokens"
    problem = f"{expo.skipped} lines could not be read" if expo.skipped else None
    if expo.cut:
        problem = f"stopped reading after {prometheus.MAX_SAMPLES} samples"
    return ServerSnapshot(kind, source, values, names, problem)
