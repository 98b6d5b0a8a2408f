"""The fleet command's typed metrics (``Result.metrics`` of ``infradoctor fleet``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from infradoctor.fleet.evidence import ModelServer, RouterTotals
from infradoctor.metrics import Metrics


@dataclass(frozen=True)
class FleetHeadline(Metrics):
    """The fleet at a glance."""

    nodes: int
    """Nodes seen by any exporter in the window."""
    gpus: int
    """GPUs with dcgm-exporter series."""
    nodes_with_findings: int
    """Nodes named by at least one finding."""
    findings: int
    """Findings reported."""
    queries: int
    """Queries sent to Prometheus."""
    bytes_fetched: int
    """Response bytes read from Prometheus."""
    query_seconds: float
    """Time spent waiting for Prometheus."""
    window_s: float
    """Length of the window."""
    step_s: float
    """Range-query resolution."""
    gpu_util_mean_pct: float | None = None
    """Mean GPU utilisation over the fleet and the window."""
    gpu_temp_max_c: float | None = None
    """Hottest GPU temperature seen."""
    gpus_throttled: int | None = None
    """GPUs throttled by a fault reason in at least a tenth of the window (None: reasons not collected)."""
    gpus_with_xid: int | None = None
    """GPUs whose last reported Xid is non-zero (None: Xid not collected)."""
    stragglers: int = 0
    """GPUs and servers that deviate from their peers (N013)."""
    container_restarts: float | None = None
    """Container restarts in the window (None: no kube-state-metrics)."""


@dataclass(frozen=True)
class WindowInfo(Metrics):
    """The incident window."""

    start: str
    """UTC start, ISO-8601."""
    end: str
    """UTC end, ISO-8601."""
    step_s: float
    """Resolution of range queries and subqueries."""


@dataclass(frozen=True)
class SourceCoverage(Metrics):
    """For how many nodes one exporter had series."""

    source: str
    """``dcgm-exporter``, ``node_exporter``, ``kube-state-metrics``, ``router``, ``model-server``."""
    nodes_seen: int
    """Nodes with series."""
    nodes_expected: int
    """Nodes it should cover."""
    missing: tuple[str, ...] = ()
    """Expected nodes without series (at most 50 named)."""
    failed: bool = False
    """Its queries failed: nothing is known about it."""


@dataclass(frozen=True)
class NodeHealth(Metrics):
    """One row of the fleet table (instance x health)."""

    node: str
    """The node."""
    health: str
    """``critical``, ``high``, ``medium``, ``low`` (worst finding), ``ok``, or ``unknown`` (no evidence)."""
    codes: tuple[str, ...] = ()
    """Codes of its findings."""
    gpus: int = 0
    """GPUs with dcgm-exporter series."""
    gpu_util_mean_pct: float | None = None
    """Mean utilisation of its GPUs over the window."""
    gpu_temp_max_c: float | None = None
    """Hottest of its GPUs."""
    sm_clock_mean_mhz: float | None = None
    """Mean SM clock of its GPUs."""
    gpu_power_mean_w: float | None = None
    """Mean power of its GPUs, summed."""
    throttled_share_max: float | None = None
    """Largest share of the window one of its GPUs was throttled."""
    xid: tuple[int, ...] = ()
    """Last non-zero Xid per GPU."""
    cpu_util_pct: float | None = None
    """CPU utilisation, window mean."""
    mem_available_pct: float | None = None
    """Least RAM available in the window, percent of total."""
    disk_used_max_pct: float | None = None
    """Fullest filesystem, percent used."""
    tcp_time_wait: float | None = None
    """Most sockets in TIME_WAIT."""
    absent: tuple[str, ...] = ()
    """Sources with no series for this node (``dcgm-exporter``, ``node_exporter``)."""


@dataclass(frozen=True)
class RouterRow(RouterTotals, Metrics):
    """One router upstream (nginx: the whole server, upstream ``-``)."""

    healthy_min: float | None = None
    """Fewest healthy members."""
    members_max: float | None = None
    """Members."""
    panic_requests: float | None = None
    """Requests Envoy routed in panic mode (every host got traffic: too few were healthy)."""
    no_healthy_upstream: float | None = None
    """Requests Envoy answered 503 for want of a healthy host."""
    unhealthy_servers: tuple[str, ...] = ()
    """HAProxy servers not UP at some point of the window, with the worst state (``b1 DOWN``)."""
    connections_active_max: float | None = None
    """nginx: most client connections open at once."""
    connections_dropped: float | None = None
    """nginx: connections accepted but not handled (``worker_connections`` ran out)."""


@dataclass(frozen=True)
class ServerRow(ModelServer, Metrics):
    """One model server."""

    @classmethod
    def of(cls, server: ModelServer) -> ServerRow:
        """The row of one model server the fleet read (its fields as read)."""
        return cls(**{f.name: getattr(server, f.name) for f in dataclasses.fields(ModelServer)})


@dataclass(frozen=True)
class ContainerSummary(Metrics):
    """What kube-state-metrics said."""

    restarts: float
    """Container restarts in the window."""
    containers_restarted: int
    """Containers that restarted."""
    oom_killed: tuple[str, ...] = ()
    """Containers last terminated by the OOM killer in the window (namespace/pod/container)."""
    crash_looping: tuple[str, ...] = ()
    """Containers waiting in CrashLoopBackOff or another start failure."""
    not_ready: tuple[str, ...] = ()
    """Pods not ready at some point (namespace/pod)."""
    pending_gpu_pods: tuple[str, ...] = ()
    """Pods requesting GPUs that were Pending."""


@dataclass(frozen=True)
class OnsetRow(Metrics):
    """When a finding's signal went bad."""

    code: str
    """Finding code."""
    entity: str
    """Node or node GPU."""
    signal: str
    """Signal."""
    first_bad: str | None
    """UTC time of the first bad step; None when it never crossed in the range data."""
    before_window: bool = False
    """It was already bad at the window's start."""


@dataclass(frozen=True)
class TimelineSeries(Metrics):
    """A series for the write-up's timeline."""

    name: str
    """Legend text."""
    signal: str
    """Signal."""
    points: tuple[tuple[float, float], ...] = ()
    """(seconds from the window start, value)."""


@dataclass(frozen=True)
class ChangeRow(Metrics):
    """A change from ``--changes``."""

    at: str
    """UTC time."""
    description: str
    """What changed."""
    node: str | None = None
    """Node, when given."""


@dataclass(frozen=True)
class PrometheusInfo(Metrics):
    """The server asked."""

    url: str
    """Base URL (credentials never included)."""
    version: str | None = None
    """Its version from buildinfo, when served."""
    auth_kind: str = "none"
    """``none``, ``bearer`` or ``basic`` (the secret itself is never stored)."""
    reachable: bool = True
    """False when it never answered."""


@dataclass(frozen=True)
class FleetMetrics(Metrics):
    """Metrics of ``infradoctor fleet``."""

    command: ClassVar[str] = "fleet"

    headline: FleetHeadline
    """The totals."""
    window: WindowInfo
    """The window."""
    prometheus: PrometheusInfo
    """The server."""
    coverage: tuple[SourceCoverage, ...] = ()
    """Per exporter, the nodes it covered."""
    nodes: tuple[NodeHealth, ...] = ()
    """The fleet table, worst first."""
    routers: tuple[RouterRow, ...] = ()
    """Router upstreams (at most 200)."""
    servers: tuple[ServerRow, ...] = ()
    """Model servers (at most 200)."""
    containers: ContainerSummary | None = None
    """kube-state-metrics' summary, when scraped."""
    onsets: tuple[OnsetRow, ...] = ()
    """When each followed finding's signal went bad, earliest first."""
    timeline: tuple[TimelineSeries, ...] = ()
    """The worst series over the window, with the fleet's median."""
    changes: tuple[ChangeRow, ...] = ()
    """Changes from ``--changes`` inside or shortly before the window."""
    alert_rules: str | None = None
    """Path of the alerting rules written by ``--emit-alert-rules``."""
