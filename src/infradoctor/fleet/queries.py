"""The PromQL that ``infradoctor fleet`` sends: every signal, its metric names, and how it is aggregated.

Every query is aggregated by Prometheus to one value per node (and GPU, container, upstream) before it is sent
back: ``*_over_time`` over the window, then ``max by (fleet_node, gpu)`` (labels such as ``UUID``, ``modelName``
and the driver version are dropped from the answer; one identity query keeps them once). Nothing pulls raw
series of the whole fleet. Range queries (the onset, the timeline) are made only for the few entities a finding
names. Metric names follow tests/corpus/metrics/NAMES.md: both the DCGM 3.x and 4.x names of the throttle field,
the 1.x ``dcgm_*`` names of ``--use-old-namespace``, vLLM's old and new KV-cache names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

NODE = "fleet_node"
"""The label every query puts the node's name in."""
BLANK_LIMIT = 1e18
"""Values at or above this are DCGM's "blank" sentinels (9223372036854775794 ...): not supported, not a value."""

_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*'
_SELECTOR = re.compile(r"\{(?:" + _MATCHER + r"(?:," + _MATCHER + r")*,?\s*)?\}")
_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SelectorError(ValueError):
    """``--selector`` is not a PromQL label selector such as ``{cluster="a",env=~"prod.*"}``."""


def selector_matchers(selector: str | None) -> str:
    """The matchers inside ``{...}`` (validated, without braces), or an empty string."""
    if not selector or not selector.strip():
        return ""
    text = selector.strip()
    if len(text) > 2000 or not _SELECTOR.fullmatch(text):
        raise SelectorError(f"not a label selector: {text[:80]!r} (expected e.g. {{cluster=\"a\"}})")
    return text[1:-1].strip().rstrip(",").strip()


def check_label(name: str, option: str) -> str:
    """A label name, validated."""
    if not _LABEL.fullmatch(name):
        raise SelectorError(f"{option}: not a label name: {name[:60]!r}")
    return name


@dataclass(frozen=True)
class Scope:
    """What every query shares: the user's matchers, the window and how nodes are named."""

    matchers: str
    """The user's ``--selector`` matchers (validated), or empty."""
    window: str
    """The window as a PromQL duration, e.g. ``3600s``."""
    step: str
    """Range and subquery resolution, e.g. ``30s``."""
    node_label: str = "instance"
    """Where the node name comes from: ``instance`` (port removed) or a label such as ``Hostname``."""
    present: frozenset[str] | None = None
    """Metric names that have series in the window (None: not known, every name is asked for)."""

    def names(self, names: Sequence[str]) -> tuple[str, ...]:
        """The names among ``names`` that have series (all of them when that is not known)."""
        if self.present is None:
            return tuple(names)
        return tuple(n for n in names if n in self.present)

    def has(self, names: Sequence[str]) -> bool:
        """Whether any of ``names`` has series in the window (True when that is not known)."""
        return bool(self.names(names))

    def select(self, names: Sequence[str], extra: str = "") -> str:
        """A selector for any of ``names`` (those with series) with the user's matchers and ``extra`` ones."""
        names = self.names(names) or tuple(names)
        if len(names) == 1:
            parts = [f'__name__="{names[0]}"']
        else:
            parts = ['__name__=~"' + "|".join(re.escape(n) for n in names) + '"']
        if extra:
            parts.append(extra)
        if self.matchers:
            parts.append(self.matchers)
        return "{" + ",".join(parts) + "}"

    def keyed(self, expr: str) -> str:
        """``expr`` with the node's name in :data:`NODE`."""
        label = self.node_label
        if label == "instance":
            return f'label_replace({expr}, "{NODE}", "$1", "instance", "(.+?)(?::[0-9]+)?")'
        if label.lower() == "hostname":
            # dcgm-exporter <= 4.5 writes Hostname, its main branch hostname: accept both.
            inner = f'label_replace({expr}, "{NODE}", "$1", "hostname", "(.+)")'
            return f'label_replace({inner}, "{NODE}", "$1", "Hostname", "(.+)")'
        return f'label_replace({expr}, "{NODE}", "$1", "{label}", "(.+)")'


@dataclass(frozen=True)
class Signal:
    """One summarised signal: the metric names that carry it and the summaries wanted."""

    name: str
    """Our name, e.g. ``temp_c``."""
    metrics: tuple[str, ...]
    """Exporter metric names, any of which carries it (new names first)."""
    stats: tuple[str, ...] = ("last",)
    """Summaries: ``last``, ``min``, ``mean``, ``max``, ``samples``."""
    unit: str = ""
    """Unit, for tables."""


_OVER_TIME = {"last": "last_over_time", "min": "min_over_time", "mean": "avg_over_time", "max": "max_over_time",
              "samples": "count_over_time"}

GPU_SIGNALS: tuple[Signal, ...] = (
    Signal("util_pct", ("DCGM_FI_DEV_GPU_UTIL", "dcgm_gpu_utilization"), ("mean",), "%"),
    Signal("mem_copy_util_pct", ("DCGM_FI_DEV_MEM_COPY_UTIL", "dcgm_mem_copy_utilization"), ("mean",), "%"),
    Signal("sm_clock_mhz", ("DCGM_FI_DEV_SM_CLOCK", "dcgm_sm_clock"), ("last", "mean"), "MHz"),
    Signal("max_sm_clock_mhz", ("DCGM_FI_DEV_MAX_SM_CLOCK",), ("last",), "MHz"),
    Signal("temp_c", ("DCGM_FI_DEV_GPU_TEMP", "dcgm_gpu_temp"), ("mean", "max"), "C"),
    Signal("power_w", ("DCGM_FI_DEV_POWER_USAGE", "dcgm_power_usage"), ("mean",), "W"),
    Signal("power_limit_w", ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"), ("last",), "W"),
    Signal("fb_used_mib", ("DCGM_FI_DEV_FB_USED", "dcgm_fb_used"), ("last", "max"), "MiB"),
    Signal("fb_free_mib", ("DCGM_FI_DEV_FB_FREE", "dcgm_fb_free"), ("last",), "MiB"),
    Signal("fb_reserved_mib", ("DCGM_FI_DEV_FB_RESERVED",), ("last",), "MiB"),
    Signal("xid", ("DCGM_FI_DEV_XID_ERRORS", "dcgm_xid_errors"), ("last", "min")),
    Signal("clock_reasons", ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                             "dcgm_clock_throttle_reasons"), ("last",)),
    Signal("ecc_dbe_volatile", ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "dcgm_ecc_dbe_volatile_total"), ("last",)),
    Signal("ecc_sbe_volatile", ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "dcgm_ecc_sbe_volatile_total"), ("last",)),
    Signal("ecc_dbe_aggregate", ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "dcgm_ecc_dbe_aggregate_total"), ("last",)),
    Signal("ecc_sbe_aggregate", ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "dcgm_ecc_sbe_aggregate_total"), ("last",)),
    Signal("retired_sbe", ("DCGM_FI_DEV_RETIRED_SBE", "dcgm_retired_pages_sbe"), ("last",)),
    Signal("retired_dbe", ("DCGM_FI_DEV_RETIRED_DBE", "dcgm_retired_pages_dbe"), ("last",)),
    Signal("retired_pending", ("DCGM_FI_DEV_RETIRED_PENDING", "dcgm_retired_pages_pending"), ("last",)),
    Signal("remapped_uncorrectable", ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",), ("last",)),
    Signal("remapped_correctable", ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",), ("last",)),
    Signal("remap_failure", ("DCGM_FI_DEV_ROW_REMAP_FAILURE",), ("last",)),
    Signal("remap_pending", ("DCGM_FI_DEV_ROW_REMAP_PENDING",), ("last",)),
    Signal("pcie_replays", ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "dcgm_pcie_replay_counter"), ("last",)),
)
"""dcgm-exporter signals, by GPU, with only the summaries the rules read (each is one pass over the samples)."""

EXPORTED = ('__name__=~"DCGM_.*|dcgm_.*|node_.*|kube_pod_.*|envoy_cluster_.*|haproxy_.*|nginx_.*|vllm:.*|'
            'tgi_.*|nv_inference_.*"')
"""The metric names infradoctor reads, for the one look-up of which of them have series in the window."""

GPU_PRESENCE = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
                "dcgm_gpu_temp", "dcgm_gpu_utilization")
"""Metrics of which any one shows that dcgm-exporter reported a GPU."""

FAULT_BITS = (0x4, 0x8, 0x20, 0x40, 0x80)
"""Clock event reasons that are not benign (power cap, HW slowdown, SW/HW thermal, power brake); see N003."""

HOST_SIGNALS: tuple[Signal, ...] = (
    Signal("load1", ("node_load1",), ("mean",)),
    Signal("load5", ("node_load5",), ("last",)),
    Signal("load15", ("node_load15",), ("last",)),
    Signal("mem_total_bytes", ("node_memory_MemTotal_bytes",), ("last",), "B"),
    Signal("mem_available_bytes", ("node_memory_MemAvailable_bytes",), ("min",), "B"),
    Signal("mem_free_bytes", ("node_memory_MemFree_bytes",), ("min",), "B"),
    Signal("mem_cached_bytes", ("node_memory_Cached_bytes",), ("min",), "B"),
    Signal("mem_buffers_bytes", ("node_memory_Buffers_bytes",), ("min",), "B"),
    Signal("swap_total_bytes", ("node_memory_SwapTotal_bytes",), ("last",), "B"),
    Signal("swap_free_bytes", ("node_memory_SwapFree_bytes",), ("min",), "B"),
    Signal("fds_allocated", ("node_filefd_allocated",), ("max",)),
    Signal("fds_maximum", ("node_filefd_maximum",), ("last",)),
    Signal("tcp_time_wait", ("node_sockstat_TCP_tw",), ("max",)),
    Signal("tcp_in_use", ("node_sockstat_TCP_inuse",), ("last",)),
)
"""node_exporter gauges, by node."""

SKIPPED_FSTYPES = "tmpfs|ramfs|squashfs|overlay|nsfs|devtmpfs|autofs|proc|sysfs|cgroup2?|fuse\\\\..*|iso9660"
"""Filesystems that never fill the way a disk does (their ``node_filesystem_*`` series are not read)."""


def gauge_query(scope: Scope, signal: Signal, by: str) -> str:
    """One instant query for every summary of ``signal``, one series per ``by`` group and summary (``stat``)."""
    parts = []
    for stat in signal.stats:
        inner = f"{_OVER_TIME[stat]}({scope.select(signal.metrics)}[{scope.window}])"
        agg = "sum" if stat == "samples" else "max"
        if stat == "min":
            agg = "min"
        expr = f"{agg} by ({by}) ({scope.keyed(inner)})"
        parts.append(f'label_replace({expr} < {BLANK_LIMIT:g}, "stat", "{stat}", "", "")')
    return " or ".join(parts)


CLOCK_REASONS = next(s for s in GPU_SIGNALS if s.name == "clock_reasons").metrics
"""The throttle-reason field's names (DCGM 4, DCGM 3, 1.x)."""


def throttle_candidates_query(scope: Scope) -> str:
    """GPUs whose reason mask reached 4 in the window: only they can have had a fault bit (0x4 and up) set.

    Testing the bits at every step of the window for every GPU (a subquery) took minutes on 8,000 GPUs; the
    few candidates are followed with a range query instead (:func:`reasons_range_query`).
    """
    inner = f"max_over_time({scope.select(CLOCK_REASONS)}[{scope.window}])"
    return f"max by ({NODE}, gpu) ({scope.keyed(inner)}) >= 4"


def reasons_range_query(scope: Scope, nodes: Sequence[str]) -> str:
    """The reason mask over time for the GPUs of these nodes (a range query)."""
    label = "Hostname" if scope.node_label.lower() == "hostname" else scope.node_label
    extra = f'{label}=~"{instance_regex(nodes)}"'
    return f"max by ({NODE}, gpu) ({scope.keyed(scope.select(CLOCK_REASONS, extra))})"


def gpu_identity_query(scope: Scope) -> str:
    """Per GPU, the labels that name it (UUID, model, PCI bus id), once (from one metric: one series per GPU)."""
    inner = f"last_over_time({scope.select(scope.names(GPU_PRESENCE)[:1] or GPU_PRESENCE)}[{scope.window}])"
    return f"count by ({NODE}, gpu, UUID, uuid, modelName, pci_bus_id) ({scope.keyed(inner)})"


def presence_query(scope: Scope, names: Sequence[str]) -> str:
    """Per node, the samples any of ``names`` had in the window: which nodes a source covered."""
    name = scope.names(names)[:1] or tuple(names[:1])  # one series per GPU or node is enough to see the node
    labels = "Hostname, hostname" if scope.node_label.lower() == "hostname" else scope.node_label
    counted = f"sum by ({labels}) (count_over_time({scope.select(name)}[{scope.window}]))"
    return f"sum by ({NODE}) ({scope.keyed(counted)})"


def earlier_presence_query(scope: Scope, names: Sequence[str], lookback_s: float, window_s: float) -> str:
    """Per node, whether any of ``names`` had series in the ``lookback_s`` before the window.

    Sampled every half hour (each instant looks back 5 minutes), so hours of history cost a dozen instant
    evaluations instead of a pass over every sample.
    """
    name = scope.names(names)[:1] or tuple(names[:1])
    labels = "Hostname, hostname" if scope.node_label.lower() == "hostname" else scope.node_label
    counted = f"count by ({labels}) ({scope.select(name)})"
    inner = f"max_over_time(({counted})[{round(lookback_s)}s:30m] offset {round(window_s)}s)"
    return f"max by ({NODE}) ({scope.keyed(inner)})"


def cpu_queries(scope: Scope) -> dict[str, str]:
    """CPU utilisation and iowait (window means) and core count, per node.

    Busy share = 1 - idle time / all time, both summed over the node's CPUs and modes: a node whose counters did
    not move (a frozen exporter) gives 0/0, no value, instead of "100% busy" from ``1 - rate(idle)``.
    """
    every = scope.select(("node_cpu_seconds_total",))
    idle = scope.select(("node_cpu_seconds_total",), 'mode="idle"')
    iowait = scope.select(("node_cpu_seconds_total",), 'mode="iowait"')
    w = scope.window
    total = f"sum by ({NODE}) ({scope.keyed(f'rate({every}[{w}])')})"
    cores = scope.keyed(f"last_over_time({idle}[{w}])")
    return {
        "cpu_util_pct.mean": f"100 * (1 - sum by ({NODE}) ({scope.keyed(f'rate({idle}[{w}])')}) / {total})",
        "cpu_iowait_pct.mean": f"100 * sum by ({NODE}) ({scope.keyed(f'rate({iowait}[{w}])')}) / {total}",
        "cpu_cores.last": f"count by ({NODE}) ({cores})",
    }


def filesystem_query(scope: Scope) -> str:
    """Per node and filesystem: size, least space available, least free, inodes (``stat`` label)."""
    extra = f'fstype!~"{SKIPPED_FSTYPES}"'
    by = f"{NODE}, mountpoint, device, fstype"
    parts = []
    for name, metric, over in (("size", "node_filesystem_size_bytes", "last_over_time"),
                               ("avail_min", "node_filesystem_avail_bytes", "min_over_time"),
                               ("free_min", "node_filesystem_free_bytes", "min_over_time"),
                               ("files", "node_filesystem_files", "last_over_time"),
                               ("files_free", "node_filesystem_files_free", "last_over_time")):
        inner = f"{over}({scope.select((metric,), extra)}[{scope.window}])"
        parts.append(f'label_replace(max by ({by}) ({scope.keyed(inner)}), "stat", "{name}", "", "")')
    return " or ".join(parts)


RESTART_LIMIT = 500
"""Containers read at most per kube-state-metrics query (topk)."""
POD_STATE_MIN_S = 300.0
"""A pod counts as not ready, or as a GPU pod pending, when it was so this long in the window (or half a shorter
window): a model server is not ready while it loads its weights, and a pod is Pending while its image is pulled."""


def pod_state_min_s(window: str) -> float:
    """Seconds a pod must be not ready or Pending in a window (``3600s``) to count."""
    seconds = float(window.rstrip("s"))
    return min(POD_STATE_MIN_S, seconds / 2)


def kube_queries(scope: Scope) -> dict[str, str]:
    """kube-state-metrics: restarts, termination and waiting reasons, pods' nodes, not-ready and pending GPU pods.

    Not ready and Pending are 0/1 series: the steps of the window (a subquery at its step) at which one was 1,
    times the step, is how long a pod was so (a mean over the samples would call a pod created a minute ago and
    not ready since "not ready the whole window").
    """
    w = scope.window
    step_s = float(scope.step.rstrip("s"))
    held = pod_state_min_s(w)
    ctr = "namespace, pod, container"
    restarts = f"increase({scope.select(('kube_pod_container_status_restarts_total',))}[{w}])"
    waiting = scope.select(("kube_pod_container_status_waiting_reason",), 'reason!="ContainerCreating"')
    gpu_requests = scope.select(("kube_pod_container_resource_requests",), 'resource="nvidia_com_gpu"')
    pending = scope.select(("kube_pod_status_phase",), 'phase="Pending"')
    not_ready = scope.select(("kube_pod_status_ready",), 'condition="false"')
    long_not_ready = (f"max by (namespace, pod) (count_over_time(({not_ready} == 1)[{w}:{scope.step}])) "
                      f"* {step_s:g} >= {held:g}")
    long_pending = (f"max by (namespace, pod) (count_over_time(({pending} == 1)[{w}:{scope.step}])) "
                    f"* {step_s:g} >= {held:g}")
    troubled = (f"max by (namespace, pod) ({restarts} > 0) or max by (namespace, pod) "
                f"(max_over_time({waiting}[{w}]) == 1) or ({long_not_ready})")
    terminated = scope.select(("kube_pod_container_status_last_terminated_reason",))
    exit_code = scope.select(("kube_pod_container_status_last_terminated_exitcode",))
    pod_info = scope.select(("kube_pod_info",))
    present = scope.select(("kube_pod_info", "kube_pod_status_phase"))
    return {
        "restarts": f"topk({RESTART_LIMIT}, max by ({ctr}) ({restarts}) > 0)",
        "terminated": f"topk({RESTART_LIMIT}, max by ({ctr}, reason) (max_over_time({terminated}[{w}])) == 1)",
        "exit_code": (f"max by ({ctr}) (last_over_time({exit_code}[{w}])) "
                      f"and on (namespace, pod, container) (max by ({ctr}) ({restarts}) > 0)"),
        "waiting": f"topk({RESTART_LIMIT}, max by ({ctr}, reason) (max_over_time({waiting}[{w}])) == 1)",
        "pod_node": (f"max by (namespace, pod, node) (last_over_time({pod_info}[{w}])) "
                     f"and on (namespace, pod) ({troubled})"),
        "not_ready": f"topk(100, {long_not_ready})",
        # per container the largest request any kube-state-metrics replica reported, summed over the pod's containers
        "pending_gpu": (f"topk(100, sum by (namespace, pod) (max by ({ctr}) (last_over_time({gpu_requests}[{w}]))) > 0 "
                        f"and on (namespace, pod) ({long_pending}))"),
        "present": f"count(last_over_time({present}[{w}]))",
    }


def router_queries(scope: Scope) -> dict[str, str]:
    """Routers over the window, one value per upstream (``<router>.<field>``).

    Envoy and HAProxy upstreams: requests, 5xx, retries, pending queue, healthy members; Envoy's panic routing and
    "no healthy upstream" answers; the 5xx HAProxy's servers answered (the rest of the backend's 5xx HAProxy
    answered itself). nginx (nginx-prometheus-exporter, which reads ``stub_status``): requests, accepted and
    handled connections, active and idle connections, and ``nginx_up`` (0: the exporter could not read nginx).
    stub_status has no upstreams, retries, status codes or health: nginx has one row per node, upstream ``-``.
    """
    w = scope.window
    env_by = f"{NODE}, envoy_cluster_name"
    ha_by = f"{NODE}, proxy"

    def inc(metric: str, by: str, extra: str = "") -> str:
        inner = f"increase({scope.select((metric,), extra)}[{w}])"
        return f"sum by ({by}) ({scope.keyed(inner)})"

    def over(func: str, metric: str, by: str, agg: str = "sum") -> str:
        inner = f"{func}({scope.select((metric,))}[{w}])"
        return f"{agg} by ({by}) ({scope.keyed(inner)})"

    servers = scope.keyed(f"last_over_time({scope.select(('haproxy_server_status',))}[{w}])")

    return {
        "envoy.requests": inc("envoy_cluster_upstream_rq_total", env_by),
        "envoy.errors_5xx": inc("envoy_cluster_upstream_rq_xx", env_by, 'envoy_response_code_class="5"'),
        "envoy.retries": inc("envoy_cluster_upstream_rq_retry", env_by),
        "envoy.pending_max": over("max_over_time", "envoy_cluster_upstream_rq_pending_active", env_by),
        "envoy.pending_overflow": inc("envoy_cluster_upstream_rq_pending_overflow", env_by),
        "envoy.healthy_min": over("min_over_time", "envoy_cluster_membership_healthy", env_by),
        "envoy.members_max": over("max_over_time", "envoy_cluster_membership_total", env_by),
        "envoy.panic": inc("envoy_cluster_lb_healthy_panic", env_by),
        "envoy.none_healthy": inc("envoy_cluster_upstream_cx_none_healthy", env_by),
        "haproxy.requests": inc("haproxy_backend_http_requests_total", ha_by),
        "haproxy.errors_5xx": inc("haproxy_backend_http_responses_total", ha_by, 'code="5xx"'),
        "haproxy.server_errors_5xx": inc("haproxy_server_http_responses_total", ha_by, 'code="5xx"'),
        "haproxy.retries": inc("haproxy_backend_retry_warnings_total", ha_by),
        "haproxy.pending_max": over("max_over_time", "haproxy_backend_current_queue", ha_by),
        "haproxy.healthy_min": over("min_over_time", "haproxy_backend_active_servers", ha_by),
        "haproxy.members_max": f"count by ({ha_by}) (count by ({ha_by}, server) ({servers}))",
        "nginx.requests": inc("nginx_http_requests_total", NODE),
        "nginx.accepted": inc("nginx_connections_accepted", NODE),
        "nginx.handled": inc("nginx_connections_handled", NODE),
        "nginx.connections_active_max": over("max_over_time", "nginx_connections_active", NODE, "max"),
        "nginx.connections_waiting_max": over("max_over_time", "nginx_connections_waiting", NODE, "max"),
        "nginx.up_min": over("min_over_time", "nginx_up", NODE, "min"),
    }


ROUTER_SERVER_LIMIT = 200
"""HAProxy servers read at most per query (topk): those not UP at some point, or with errors."""


def router_server_queries(scope: Scope) -> dict[str, str]:
    """HAProxy servers that were not UP at some point of the window, or answered errors (``stat``-less values).

    ``state``: one series per server and state other than UP it was in (``haproxy_server_status`` is 1 for the
    current state); ``hrsp_5xx``, ``econ``, ``eresp``: its 5xx answers, connection and response errors, for servers
    with any; ``stot``: its sessions, for those servers only. Envoy's Prometheus statistics carry no per-host
    series; its membership gauges stand in (see :mod:`infradoctor.fleet.service_view`).
    """
    w = scope.window
    by = f"{NODE}, proxy, server"

    def inc(metric: str, extra: str = "") -> str:
        return f"sum by ({by}) ({scope.keyed(f'increase({scope.select((metric,), extra)}[{w}])')})"

    errors = {"hrsp_5xx": inc("haproxy_server_http_responses_total", 'code="5xx"'),
              "econ": inc("haproxy_server_connection_errors_total"),
              "eresp": inc("haproxy_server_response_errors_total")}
    status = scope.select(("haproxy_server_status",), 'state!="UP"')
    state = f"max by ({by}, state) ({scope.keyed(f'max_over_time({status}[{w}])')}) == 1"
    erring = " or ".join(f"({expr} > 0)" for expr in errors.values())
    out = {"state": f"topk({ROUTER_SERVER_LIMIT}, {state})"}
    out.update({name: f"topk({ROUTER_SERVER_LIMIT}, {expr} > 0)" for name, expr in errors.items()})
    out["stot"] = f"{inc('haproxy_server_sessions_total')} and on ({by}) ({erring} or {state})"
    return out


def server_queries(scope: Scope) -> dict[str, str]:
    """vLLM, TGI and Triton: waiting queue, running batch, KV cache, preemptions, median latency."""
    w = scope.window

    def over(func: str, names: tuple[str, ...], by: str) -> str:
        inner = f"{func}({scope.select(names)}[{w}])"
        return f"max by ({by}) ({scope.keyed(inner)})"

    vllm = f"{NODE}, model_name"
    buckets = scope.keyed(f"increase({scope.select(('vllm:e2e_request_latency_seconds_bucket',))}[{w}])")
    preemptions = scope.keyed(f"increase({scope.select(('vllm:num_preemptions_total',))}[{w}])")
    return {
        "vllm.queue_max": over("max_over_time", ("vllm:num_requests_waiting",), vllm),
        "vllm.queue_mean": over("avg_over_time", ("vllm:num_requests_waiting",), vllm),
        "vllm.running_mean": over("avg_over_time", ("vllm:num_requests_running",), vllm),
        "vllm.kv_cache_max": over("max_over_time", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
                                  vllm),
        "vllm.preemptions": f"sum by ({vllm}) ({preemptions})",
        "vllm.e2e_p50_s": f"histogram_quantile(0.5, sum by ({vllm}, le) ({buckets}))",
        "tgi.queue_max": over("max_over_time", ("tgi_queue_size",), NODE),
        "tgi.queue_mean": over("avg_over_time", ("tgi_queue_size",), NODE),
        "tgi.running_mean": over("avg_over_time", ("tgi_batch_current_size",), NODE),
        "triton.queue_max": over("max_over_time", ("nv_inference_pending_request_count",), f"{NODE}, model"),
        "triton.queue_mean": over("avg_over_time", ("nv_inference_pending_request_count",), f"{NODE}, model"),
    }


def instance_regex(nodes: Sequence[str]) -> str:
    """A regex matching the ``instance`` (or node label) values of these nodes, with or without a port."""
    # re.escape for RE2, then backslashes doubled for the PromQL string literal
    return "|".join(re.escape(n).replace("\\", "\\\\").replace('"', '\\"') + "(?::[0-9]+)?" for n in nodes)


def timeline_query(scope: Scope, signal: Signal, nodes: Sequence[str], by: str) -> str:
    """The values of one signal over time for a few nodes (a range query), one series per ``by`` group."""
    label = "instance" if scope.node_label == "instance" else scope.node_label
    if label.lower() == "hostname":
        label = "Hostname"
    extra = f'{label}=~"{instance_regex(nodes)}"'
    return f"max by ({by}) ({scope.keyed(scope.select(signal.metrics, extra))}) < {BLANK_LIMIT:g}"


def fleet_median_query(scope: Scope, signal: Signal) -> str:
    """The fleet's median of one signal at each step (a range query; one series)."""
    return f"quantile(0.5, {scope.select(signal.metrics)} < {BLANK_LIMIT:g})"
