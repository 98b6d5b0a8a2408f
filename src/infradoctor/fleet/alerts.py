"""Prometheus alerting rules for what infradoctor's rules check, with thresholds from a healthy baseline window.

The fixed thresholds are the rules' own constants (N004's memory share, N006's available RAM, S006's error rate
...), so an alert and a finding mean the same thing. The thresholds that depend on the fleet (temperature,
queue depth, latency, the clock a straggler falls below) come from a healthy baseline window: the fleet's p99
there (p50 for clocks), with a margin. The file is valid for ``promtool check rules``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infradoctor.fleet import queries as q
from infradoctor.fleet.evidence import Window
from infradoctor.fleet.prom import PrometheusClient
from infradoctor.fleet.rules import n013_gpu_straggler
from infradoctor.fleet.rules.n015_fleet_onset import iso
from infradoctor.load.rules import s006_error_rate
from infradoctor.node.rules import (
    n004_gpu_memory_pressure,
    n006_host_memory_pressure,
    n007_cpu_saturated,
    n008_disk_full,
    n009_socket_exhaustion,
    n014_container_restarts,
)
from infradoctor.route.rules import r005_retry_amplification, r013_router_rejected

TEMP_MARGIN_C = 8.0
"""Degrees above the baseline's p99 GPU temperature at which the temperature alert fires."""
QUEUE_FACTOR = 2.0
"""Times the baseline's p99 waiting queue at which the queue alert fires."""
LATENCY_FACTOR = 2.0
"""Times the baseline's p99 request latency at which the latency alert fires."""
DEFAULT_TEMP_C = 85.0
"""Temperature threshold when the baseline has no GPU temperatures."""


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule."""

    name: str
    """Alert name (CamelCase, prefixed ``Infradoctor``)."""
    expr: str
    """PromQL; the alert fires for each series it returns."""
    duration: str
    """How long it must hold (``for:``)."""
    severity: str
    """``critical``, ``warning`` or ``info`` label."""
    code: str
    """The infradoctor finding code it stands for."""
    summary: str
    """One line, may use ``{{ $labels.x }}`` and ``{{ $value }}``."""
    threshold: str = ""
    """Where the threshold came from (the rule's constant or the baseline)."""


@dataclass(frozen=True)
class Baseline:
    """The fleet-dependent thresholds, read from a healthy window (None where it had no data)."""

    window: Window
    """The baseline window."""
    temp_p99_c: float | None = None
    """p99 of GPU temperature over the fleet and the window."""
    queue_p99: float | None = None
    """p99 of the model servers' waiting queue."""
    latency_p99_s: float | None = None
    """p99 of vLLM's end-to-end request latency over the window."""


def read_baseline(client: PrometheusClient, window: Window, scope: q.Scope) -> tuple[Baseline, list[str]]:
    """The baseline's p99s (server-side: ``quantile_over_time`` of the fleet's per-step p99), and the problems."""
    problems: list[str] = []
    w, step = window.range, f"{window.step_s:g}s"

    def one(expr: str, what: str) -> float | None:
        answer = client.query(expr, window.end)
        if answer.failure is not None:
            problems.append(f"baseline {what}: {answer.failure.kind}: {answer.failure.message}")
            return None
        return answer.series[0].last if answer.series else None

    temp = scope.select(("DCGM_FI_DEV_GPU_TEMP", "dcgm_gpu_temp"))
    queue = scope.select(("vllm:num_requests_waiting", "tgi_queue_size", "nv_inference_pending_request_count"))
    buckets = scope.select(("vllm:e2e_request_latency_seconds_bucket",))
    return Baseline(
        window,
        temp_p99_c=one(f"quantile_over_time(0.99, (quantile(0.99, {temp} < {q.BLANK_LIMIT:g}))[{w}:{step}])",
                       "GPU temperature"),
        queue_p99=one(f"quantile_over_time(0.99, (quantile(0.99, {queue}))[{w}:{step}])", "queue depth"),
        latency_p99_s=one(f"histogram_quantile(0.99, sum by (le) (increase({buckets}[{w}])))", "latency"),
    ), problems


def _fault_bits(metric: str) -> str:
    return " + ".join(f"floor({metric} / {bit}) % 2" for bit in q.FAULT_BITS)


def alert_rules(baseline: Baseline, matchers: str = "") -> list[AlertRule]:
    """The rules, fixed thresholds from the rule modules and fleet-dependent ones from the baseline."""
    sel = f"{{{matchers}}}" if matchers else ""
    with_sel = ("," + matchers) if matchers else ""
    base = f"baseline {iso(baseline.window.start)}..{iso(baseline.window.end)}"
    temp_limit = (baseline.temp_p99_c + TEMP_MARGIN_C) if baseline.temp_p99_c is not None else DEFAULT_TEMP_C
    temp_from = (f"{base}: p99 {baseline.temp_p99_c:.1f} C + {TEMP_MARGIN_C:g}" if baseline.temp_p99_c is not None
                 else f"no baseline temperatures: default {DEFAULT_TEMP_C:g} C")
    mem = n004_gpu_memory_pressure.USED_FRACTION
    clock_share = 1 - n013_gpu_straggler.MIN_RELATIVE
    busy = n013_gpu_straggler.BUSY_UTIL_PCT
    rules = [
        AlertRule("InfradoctorGpuXid", f"DCGM_FI_DEV_XID_ERRORS{sel} > 0 "
                  f"and changes(DCGM_FI_DEV_XID_ERRORS{sel}[10m]) > 0", "0m", "critical", "N001",
                  "GPU {{ $labels.gpu }} on {{ $labels.instance }} reported Xid {{ $value }}",
                  "any new Xid (DCGM_FI_DEV_XID_ERRORS holds the last Xid value)"),
        AlertRule("InfradoctorGpuEccUncorrectable", f"increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{sel}[10m]) > 0",
                  "0m", "critical", "N002",
                  "GPU {{ $labels.gpu }} on {{ $labels.instance }}: uncorrectable ECC errors",
                  "any (needs ECC in dcgm-exporter's counters)"),
        AlertRule("InfradoctorGpuRowRemapFailure", f"DCGM_FI_DEV_ROW_REMAP_FAILURE{sel} > 0", "0m", "critical",
                  "N002", "GPU {{ $labels.gpu }} on {{ $labels.instance }}: row remapping failed", "any"),
        AlertRule("InfradoctorGpuThrottled",
                  f"({_fault_bits('DCGM_FI_DEV_CLOCK_THROTTLE_REASONS' + sel)}) > 0", "10m", "warning", "N003",
                  "GPU {{ $labels.gpu }} on {{ $labels.instance }} throttled (power cap, slowdown, thermal, brake)",
                  "fault reason bits 0x4, 0x8, 0x20, 0x40, 0x80 (N003)"),
        AlertRule("InfradoctorGpuThrottledDcgm4",
                  f"({_fault_bits('DCGM_FI_DEV_CLOCKS_EVENT_REASONS' + sel)}) > 0", "10m", "warning", "N003",
                  "GPU {{ $labels.gpu }} on {{ $labels.instance }} throttled (power cap, slowdown, thermal, brake)",
                  "the DCGM 4 name of the same field"),
        AlertRule("InfradoctorGpuMemoryFull",
                  f"DCGM_FI_DEV_FB_USED{sel} / ignoring(__name__) (DCGM_FI_DEV_FB_USED{sel} + ignoring(__name__) "
                  f"DCGM_FI_DEV_FB_FREE{sel}) > {mem:g}", "10m", "warning", "N004",
                  "GPU {{ $labels.gpu }} on {{ $labels.instance }} memory {{ $value | humanizePercentage }} used",
                  f"N004 USED_FRACTION = {mem:g}"),
        AlertRule("InfradoctorGpuHot", f"DCGM_FI_DEV_GPU_TEMP{sel} > {temp_limit:.1f}", "10m", "warning", "N013",
                  "GPU {{ $labels.gpu }} on {{ $labels.instance }} at {{ $value }} C", temp_from),
        AlertRule("InfradoctorGpuStraggler",
                  f"(DCGM_FI_DEV_SM_CLOCK{sel} < on (modelName) group_left() "
                  f"({clock_share:g} * quantile by (modelName) (0.5, DCGM_FI_DEV_SM_CLOCK{sel})))"
                  f" and on (instance, gpu) (DCGM_FI_DEV_GPU_UTIL{sel} > {busy:g})", "15m", "warning", "N013",
                  "GPU {{ $labels.gpu }} on {{ $labels.instance }} clocks {{ $value }} MHz, below its peers",
                  f"N013: {n013_gpu_straggler.MIN_RELATIVE:g} below the median clock of its model while busy"),
        AlertRule("InfradoctorHostMemoryLow",
                  f"node_memory_MemAvailable_bytes{sel} / ignoring(__name__) node_memory_MemTotal_bytes{sel} < "
                  f"{n006_host_memory_pressure.AVAILABLE_FRACTION:g}", "5m", "critical", "N006",
                  "{{ $labels.instance }}: only {{ $value | humanizePercentage }} of RAM available",
                  f"N006 AVAILABLE_FRACTION = {n006_host_memory_pressure.AVAILABLE_FRACTION:g}"),
        AlertRule("InfradoctorHostCpuSaturated",
                  f'100 * (1 - avg by (instance) (rate(node_cpu_seconds_total{{mode="idle"{with_sel}}}[5m]))) >= '
                  f"{n007_cpu_saturated.BUSY_PCT:g}", "15m", "warning", "N007",
                  "{{ $labels.instance }}: CPU {{ $value }}% busy", f"N007 BUSY_PCT = {n007_cpu_saturated.BUSY_PCT:g}"),
        AlertRule("InfradoctorDiskFull",
                  f'1 - node_filesystem_avail_bytes{{fstype!~"{q.SKIPPED_FSTYPES}"{with_sel}}} / ignoring(__name__) '
                  f'node_filesystem_size_bytes{{fstype!~"{q.SKIPPED_FSTYPES}"{with_sel}}} > '
                  f"{n008_disk_full.USED_FRACTION:g}", "10m", "warning", "N008",
                  "{{ $labels.instance }} {{ $labels.mountpoint }} {{ $value | humanizePercentage }} full",
                  f"N008 USED_FRACTION = {n008_disk_full.USED_FRACTION:g}"),
        AlertRule("InfradoctorFileHandles",
                  f"node_filefd_allocated{sel} / ignoring(__name__) node_filefd_maximum{sel} >= "
                  f"{n009_socket_exhaustion.FD_FRACTION:g}", "10m", "warning", "N009",
                  "{{ $labels.instance }}: {{ $value | humanizePercentage }} of file handles allocated",
                  f"N009 FD_FRACTION = {n009_socket_exhaustion.FD_FRACTION:g}"),
        AlertRule("InfradoctorContainerRestarts",
                  f"increase(kube_pod_container_status_restarts_total{sel}[15m]) >= "
                  f"{n014_container_restarts.MIN_RESTARTS:g}", "0m", "warning", "N014",
                  "{{ $labels.namespace }}/{{ $labels.pod }}/{{ $labels.container }} restarted",
                  f"N014 MIN_RESTARTS = {n014_container_restarts.MIN_RESTARTS:g}"),
        AlertRule("InfradoctorContainerOomKilled",
                  f'kube_pod_container_status_last_terminated_reason{{reason="OOMKilled"{with_sel}}} == 1 and on '
                  f"(namespace, pod, container) increase(kube_pod_container_status_restarts_total{sel}[15m]) > 0",
                  "0m", "critical", "N014",
                  "{{ $labels.namespace }}/{{ $labels.pod }}/{{ $labels.container }} was OOM-killed", "any"),
        AlertRule("InfradoctorRouterErrors",
                  f"sum by (instance, envoy_cluster_name) (rate(envoy_cluster_upstream_rq_xx"
                  f'{{envoy_response_code_class="5"{with_sel}}}[5m])) / sum by (instance, envoy_cluster_name) '
                  f"(rate(envoy_cluster_upstream_rq_total{sel}[5m])) > {s006_error_rate.THRESHOLD:g}",
                  "5m", "warning", "S006", "Envoy {{ $labels.instance }} cluster {{ $labels.envoy_cluster_name }}: "
                  "{{ $value | humanizePercentage }} 5xx", f"S006 THRESHOLD = {s006_error_rate.THRESHOLD:g}"),
        AlertRule("InfradoctorRouterRetries",
                  f"sum by (instance, envoy_cluster_name) (rate(envoy_cluster_upstream_rq_retry{sel}[5m])) / sum by "
                  f"(instance, envoy_cluster_name) (rate(envoy_cluster_upstream_rq_total{sel}[5m])) > "
                  f"{r005_retry_amplification.RETRY_SHARE:g}", "5m", "warning", "R005",
                  "Envoy {{ $labels.instance }} cluster {{ $labels.envoy_cluster_name }}: retries at "
                  "{{ $value | humanizePercentage }} of requests",
                  f"R005 RETRY_SHARE = {r005_retry_amplification.RETRY_SHARE:g}"),
        AlertRule("InfradoctorHaproxyErrors",
                  f'sum by (instance, proxy) (rate(haproxy_backend_http_responses_total{{code="5xx"{with_sel}}}[5m])) '
                  f"/ sum by (instance, proxy) (rate(haproxy_backend_http_requests_total{sel}[5m])) > "
                  f"{s006_error_rate.THRESHOLD:g}", "5m", "warning", "S006",
                  "HAProxy {{ $labels.instance }} backend {{ $labels.proxy }}: {{ $value | humanizePercentage }} 5xx",
                  f"S006 THRESHOLD = {s006_error_rate.THRESHOLD:g}"),
    ]
    rules += [
        AlertRule("InfradoctorRouterQueue",
                  f"max by (instance, envoy_cluster_name) (envoy_cluster_upstream_rq_pending_active{sel}) > 0",
                  "10m", "warning", "R009",
                  "Envoy {{ $labels.instance }} cluster {{ $labels.envoy_cluster_name }}: requests have waited in "
                  "its pending queue for 10 minutes ({{ $value }} now)",
                  "R009: requests waiting in Envoy's pending queue at every evaluation for 10 minutes"),
        AlertRule("InfradoctorHaproxyQueue",
                  f"max by (instance, proxy) (haproxy_backend_current_queue{sel}) > 0", "10m", "warning", "R009",
                  "HAProxy {{ $labels.instance }} backend {{ $labels.proxy }}: requests have waited in its queue for "
                  "10 minutes ({{ $value }} now)",
                  "R009: requests waiting in HAProxy's backend queue at every evaluation for 10 minutes"),
        AlertRule("InfradoctorRouterRejected",
                  f"sum by (instance, envoy_cluster_name) (increase(envoy_cluster_upstream_rq_pending_overflow{sel}"
                  f"[5m])) >= {r013_router_rejected.MIN_REJECTED:g}", "0m", "warning", "R013",
                  "Envoy {{ $labels.instance }} cluster {{ $labels.envoy_cluster_name }} refused {{ $value }} "
                  "requests in 5 minutes: its pending queue or circuit breaker was full (503 UO)",
                  f"R013 MIN_REJECTED = {r013_router_rejected.MIN_REJECTED:g} in 5 minutes"),
    ]
    if baseline.queue_p99 is not None:
        limit = max(1.0, baseline.queue_p99 * QUEUE_FACTOR)
        rules.append(AlertRule(
            "InfradoctorServerQueue", f"vllm:num_requests_waiting{sel} > {limit:g}", "10m", "warning", "S010",
            "{{ $labels.instance }} {{ $labels.model_name }}: {{ $value }} requests waiting",
            f"{base}: p99 queue {baseline.queue_p99:g} x {QUEUE_FACTOR:g}"))
    if baseline.latency_p99_s is not None:
        limit = baseline.latency_p99_s * LATENCY_FACTOR
        rules.append(AlertRule(
            "InfradoctorServerLatency",
            f"histogram_quantile(0.99, sum by (instance, model_name, le) "
            f"(rate(vllm:e2e_request_latency_seconds_bucket{sel}[5m]))) > {limit:g}", "10m", "warning", "S010",
            "{{ $labels.instance }} {{ $labels.model_name }}: p99 latency {{ $value }} s",
            f"{base}: p99 latency {baseline.latency_p99_s:.3g} s x {LATENCY_FACTOR:g}"))
    return rules


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_rules(rules: Sequence[AlertRule], *, group: str = "infradoctor-fleet") -> str:
    """The rules as a Prometheus rule file (YAML)."""
    out = ["# Generated by infradoctor fleet --emit-alert-rules. Each alert names the finding code it stands for.",
           "groups:", f"  - name: {group}", "    rules:"]
    for rule in rules:
        out += [f"      - alert: {rule.name}", "        expr: >-", f"          {rule.expr}"]
        if rule.duration != "0m":
            out.append(f"        for: {rule.duration}")
        out += ["        labels:", f"          severity: {rule.severity}", f"          infradoctor_code: {rule.code}",
                "        annotations:", f"          summary: {_quoted(rule.summary)}",
                f"          threshold: {_quoted(rule.threshold)}",
                f"          runbook: {_quoted(f'infradoctor rules {rule.code}')}"]
    return "\n".join(out) + "\n"
