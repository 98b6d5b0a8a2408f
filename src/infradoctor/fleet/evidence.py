"""What ``infradoctor fleet`` read from Prometheus: frozen dataclasses, one docstring line per field.

Values are summaries over the incident window computed by Prometheus (``*_over_time``, aggregated by node and
GPU), never raw pulls. ``None`` means "not collected": the exporter did not export that field for that entity (for
dcgm-exporter, ECC, retired pages and throttle reasons are off in its default counters), or the query failed. The
per-source coverage (:class:`Coverage`) says for how many nodes each exporter had series, so that absent evidence
is reported as absent and never as healthy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Window:
    """The incident window the queries covered."""

    start: float
    """Unix time of the first instant."""
    end: float
    """Unix time of the last instant."""
    step_s: float
    """Range-query resolution, sized to the window (about 60-240 points)."""

    @property
    def seconds(self) -> float:
        """Length of the window."""
        return self.end - self.start

    @property
    def range(self) -> str:
        """The window as a PromQL range duration, e.g. ``3600s``."""
        return f"{max(1, round(self.seconds))}s"


@dataclass(frozen=True)
class Stat:
    """One signal of one entity summarised over the window; None where Prometheus had no sample."""

    last: float | None = None
    """Newest value in the window (the state at its end)."""
    min: float | None = None
    """Smallest value."""
    mean: float | None = None
    """Time-weighted mean of the samples."""
    max: float | None = None
    """Largest value."""
    samples: int | None = None
    """Samples in the window, when counted."""


@dataclass(frozen=True)
class FleetGpu:
    """One GPU of one node as dcgm-exporter reported it."""

    node: str
    """The node (the ``instance`` host, or the label chosen with ``--node-label``)."""
    gpu: str
    """dcgm-exporter's ``gpu`` label (the device index)."""
    uuid: str | None = None
    """``UUID`` (or ``uuid`` with ``--use-old-namespace``)."""
    model: str | None = None
    """``modelName``, e.g. ``NVIDIA H100 80GB HBM3``."""
    pci_bus_id: str | None = None
    """``pci_bus_id`` label, when exported."""
    signals: Mapping[str, Stat] = field(default_factory=dict)
    """Per signal (``util_pct``, ``sm_clock_mhz``, ``temp_c``, ``power_w``, ``xid`` ...): its window summary."""
    throttled_share: float | None = None
    """Share of the window's steps with a fault reason active (slowdown, thermal, power brake: not the power cap,
    which is normal power management unless the GPU works at its limit: N003 judges that from ``reason_share``)."""
    reason_share: Mapping[str, float] = field(default_factory=dict)
    """Per non-benign clock event reason (``sw_power_cap``, ``hw_slowdown`` ...): share of the window's steps it
    was active."""
    unknown: tuple[str, ...] = ()
    """Signals whose query failed: unknown, not absent (no estimate stands in for them)."""

    @property
    def label(self) -> str:
        """``node GPU 3``: how fleet findings name a GPU."""
        return f"{self.node} GPU {self.gpu}"


@dataclass(frozen=True)
class FleetDisk:
    """One filesystem of one node (node_exporter ``node_filesystem_*``)."""

    mountpoint: str
    """Mount point."""
    device: str
    """Device label."""
    fstype: str
    """Filesystem type."""
    size_bytes: float
    """Size at the end of the window."""
    avail_bytes_min: float
    """Least space available to users in the window."""
    free_bytes_min: float
    """Least free space in the window."""
    files: float | None = None
    """Inodes."""
    files_free: float | None = None
    """Free inodes at the end of the window."""


@dataclass(frozen=True)
class FleetHost:
    """One node as node_exporter reported it."""

    node: str
    """The node."""
    signals: Mapping[str, Stat] = field(default_factory=dict)
    """Per signal (``cpu_util_pct``, ``load1``, ``mem_available_bytes`` ...): its window summary."""
    disks: tuple[FleetDisk, ...] = ()
    """The fullest filesystems (at most four)."""
    unknown: tuple[str, ...] = ()
    """Signals whose query failed: unknown, not absent (no estimate stands in for them)."""


@dataclass(frozen=True)
class RouterServer:
    """One HAProxy server that was not UP at some point of the window, or answered errors."""

    name: str
    """HAProxy's server name."""
    state: str
    """The worst state it was in (``DOWN``, ``MAINT``, ``DRAIN``, ``NOLB``), or ``UP``."""
    counters: Mapping[str, float] = field(default_factory=dict)
    """Its growth in the window: ``hrsp_5xx``, ``econ`` (connection errors), ``eresp``, ``stot`` (sessions)."""


@dataclass(frozen=True)
class RouterTotals:
    """One upstream cluster or backend of one router: its totals over the window, as read and as reported."""

    node: str
    """The router's node."""
    router: str
    """``envoy``, ``haproxy`` or ``nginx``."""
    upstream: str
    """Envoy cluster name or HAProxy backend (proxy) name; ``-`` for nginx (stub_status has no upstreams)."""
    requests: float | None = None
    """Requests sent upstream in the window (nginx: requests it received)."""
    errors_5xx: float | None = None
    """5xx responses in the window."""
    retries: float | None = None
    """Retries in the window (Envoy ``upstream_rq_retry``, HAProxy ``retry_warnings``)."""
    pending_max: float | None = None
    """Largest pending-request queue seen (Envoy ``upstream_rq_pending_active``, HAProxy ``current_queue``)."""


@dataclass(frozen=True)
class RouterUpstream(RouterTotals):
    """One upstream cluster or backend of one router, over the window (Envoy, HAProxy; nginx: the whole server)."""

    pending_overflow: float | None = None
    """Requests refused because the pending queue or a breaker was full, in the window (Envoy)."""
    healthy_min: float | None = None
    """Fewest healthy members seen (Envoy ``membership_healthy``, HAProxy ``active_servers``)."""
    members_max: float | None = None
    """Members of the upstream (Envoy ``membership_total``; HAProxy: servers seen in any state)."""
    panic: float | None = None
    """Requests Envoy routed in panic mode (``lb_healthy_panic``: too few healthy hosts, so every host got traffic)."""
    none_healthy: float | None = None
    """Requests Envoy answered 503 itself for want of a healthy host (``upstream_cx_none_healthy``)."""
    server_errors_5xx: float | None = None
    """5xx the backend's servers answered (HAProxy); the rest of ``errors_5xx`` HAProxy answered itself."""
    accepted: float | None = None
    """Client connections nginx accepted in the window (``nginx_connections_accepted``)."""
    handled: float | None = None
    """... and handled (fewer than accepted: ``worker_connections`` ran out)."""
    connections_active_max: float | None = None
    """Most client connections open at once (nginx ``connections_active``)."""
    connections_waiting_max: float | None = None
    """Most idle keep-alive connections (nginx ``connections_waiting``)."""
    up_min: float | None = None
    """nginx-prometheus-exporter's ``nginx_up``: 0 when it could not read nginx's stub_status at some scrape."""
    servers: tuple[RouterServer, ...] = ()
    """HAProxy servers that were not UP at some point, or answered errors (at most 200 per query)."""


@dataclass(frozen=True)
class ModelServer:
    """One model server (vLLM, TGI, Triton) over the window."""

    node: str
    """The server's node."""
    server: str
    """``vllm``, ``tgi`` or ``triton``."""
    model: str
    """The model name label, or ``-`` where the server has none (TGI)."""
    queue_max: float | None = None
    """Largest waiting queue (vLLM ``num_requests_waiting``, TGI ``queue_size``, Triton pending requests)."""
    queue_mean: float | None = None
    """Mean waiting queue."""
    running_mean: float | None = None
    """Mean requests in the running batch."""
    kv_cache_max: float | None = None
    """Largest KV-cache usage, fraction 0-1 (vLLM)."""
    preemptions: float | None = None
    """Requests preempted in the window (vLLM)."""
    e2e_p50_s: float | None = None
    """Median end-to-end request latency over the window, from the server's histogram (vLLM)."""


@dataclass(frozen=True)
class Coverage:
    """For how many nodes one exporter had series in the window."""

    source: str
    """``dcgm-exporter``, ``node_exporter``, ``kube-state-metrics``, ``router``, ``model-server``."""
    nodes_seen: tuple[str, ...]
    """Nodes with series from this source."""
    nodes_expected: tuple[str, ...]
    """Nodes this source should cover (known from any source; for dcgm-exporter the GPU nodes)."""
    failed: bool = False
    """The query for this source failed: nothing is known, not even whether it is deployed."""

    @property
    def missing(self) -> tuple[str, ...]:
        """Expected nodes without series."""
        seen = set(self.nodes_seen)
        return tuple(n for n in self.nodes_expected if n not in seen)


@dataclass(frozen=True)
class Change:
    """A deploy or configuration change from ``--changes``."""

    at: float
    """Unix time."""
    description: str
    """What changed (as written in the file)."""
    node: str | None = None
    """Node it touched, when the file says."""


@dataclass(frozen=True)
class Onset:
    """When one finding's signal first crossed its rule's threshold in the window."""

    code: str
    """The finding's code."""
    entity: str
    """``node`` or ``node GPU n``."""
    signal: str
    """The signal that went bad, e.g. ``temp_c``."""
    first_bad: float | None
    """Unix time of the first step at or beyond the threshold; None when it never crossed in the range data."""
    bad_at_start: bool
    """Already bad at the window's first step (the onset lies before the window)."""
    threshold: float
    """The threshold used (the rule's)."""
    title: str = ""
    """The finding's title."""


@dataclass(frozen=True)
class SeriesLine:
    """A bounded time series kept for the write-up's timeline (the worst entities' values over the window)."""

    name: str
    """``node GPU n temp_c`` or ``fleet median temp_c``."""
    signal: str
    """The signal."""
    points: tuple[tuple[float, float], ...]
    """(unix time, value), oldest first."""


@dataclass(frozen=True)
class OnsetEvidence:
    """What the onset check reads: the first bad time of each finding, and the changes before it."""

    window: Window
    """The window."""
    onsets: tuple[Onset, ...]
    """One per finding whose signal was queried over time."""
    changes: tuple[Change, ...] = ()
    """Deploy or configuration changes from ``--changes``, oldest first."""


@dataclass(frozen=True)
class FleetEvidence:
    """Everything ``infradoctor fleet`` read; the fleet-only rules (N013) read this."""

    window: Window
    """The window."""
    gpus: tuple[FleetGpu, ...] = ()
    """Every GPU with dcgm-exporter series."""
    hosts: tuple[FleetHost, ...] = ()
    """Every node with node_exporter series."""
    routers: tuple[RouterUpstream, ...] = ()
    """Router upstreams."""
    servers: tuple[ModelServer, ...] = ()
    """Model servers."""
    coverage: tuple[Coverage, ...] = ()
    """Per exporter, the nodes it covered."""
    role_label: str | None = None
    """The label that splits GPUs into peer groups besides the model name (``--role-label``), if any."""
    roles: Mapping[str, str] = field(default_factory=dict)
    """Node -> role (value of ``role_label``)."""
