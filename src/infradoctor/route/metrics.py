"""The route command's typed metrics (``Result.metrics`` of ``infradoctor route``).

The layout is documented in :mod:`infradoctor.route`; every field has its docstring here (the fields the
evidence holds too beside it: :class:`~infradoctor.route.evidence.AttributionCounts` and ``DistributionCounts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from infradoctor.metrics import Metrics
from infradoctor.route.evidence import AttributionCounts, DistributionCounts
from infradoctor.telemetry.evidence import RouterWindow, ServerPoint


@dataclass(frozen=True)
class EstimateMetrics(Metrics):
    """A statistic with its 95% confidence interval (ms unless named otherwise)."""

    value: float | None
    """The estimate; None without data."""
    ci_low: float | None
    """Lower end of the interval."""
    ci_high: float | None
    """Upper end of the interval."""


@dataclass(frozen=True)
class PathMetrics(Metrics):
    """Latency and errors of one path (through the router, or straight to one backend)."""

    name: str
    """``router`` or the backend URL."""
    kind: str
    """``router`` or ``direct``."""
    url: str
    """The URL requests were sent to."""
    requests: int
    """Requests sent."""
    ok: int
    """Requests that succeeded."""
    errors: dict[str, int]
    """Failed requests by class."""
    error_rate: float
    """Failed share."""
    p50_ms: EstimateMetrics
    """Median of successful requests with its order-statistic CI."""
    p90_ms: EstimateMetrics
    """90th percentile."""
    p99_ms: EstimateMetrics
    """99th percentile."""
    mean_ms: float | None
    """Mean of successful requests."""
    max_ms: float | None
    """Slowest successful request."""


@dataclass(frozen=True)
class BackendAttributionMetrics(Metrics):
    """Router-added latency for the routed requests one backend served."""

    backend: str
    """Backend URL."""
    routed_n: int
    """Successful routed requests it served (first attempts)."""
    direct_n: int
    """Successful direct requests to it."""
    added_p50_ms: EstimateMetrics
    """Routed minus direct p50, bootstrap CI."""


@dataclass(frozen=True)
class AttributionMetrics(AttributionCounts, Metrics):
    """How much latency the router adds: routed minus direct."""

    added_p50_ms: EstimateMetrics
    """Router-added latency at p50 with a bootstrap 95% CI."""
    added_p99_ms: EstimateMetrics
    """Router-added latency at p99."""
    added_fraction_p50: float | None
    """Share of the routed median the router adds."""
    p_value: float | None
    """One-sided Mann-Whitney p-value (routed slower than direct)."""
    per_backend: tuple[BackendAttributionMetrics, ...] = ()
    """The comparison per identified backend."""


@dataclass(frozen=True)
class HealthMetrics(Metrics):
    """A backend's health endpoint."""

    url: str
    """The health URL asked (the first that answered, or the last tried)."""
    status: int | None
    """HTTP status; None when nothing answered."""
    healthy: bool
    """2xx."""
    latency_ms: float | None
    """Time to the answer."""
    error: str | None
    """Why it failed."""
    tried: tuple[str, ...] = ()
    """Paths tried, in order."""


@dataclass(frozen=True)
class ColdMetrics(Metrics):
    """First requests to a backend against its steady state."""

    first_n: int
    """First requests compared."""
    first_p50_ms: float | None
    """Their median (on the direct path's scale)."""
    steady_p50_ms: float | None
    """Steady median."""
    first_max_ms: float | None
    """Slowest first request."""
    ratio: float | None
    """First over steady median."""


@dataclass(frozen=True)
class BackendMetrics(Metrics):
    """Everything measured about one ``--backend``."""

    url: str
    """As given."""
    address: str
    """``host:port`` matched against upstream headers."""
    share: float | None
    """Its share of attributed routed requests."""
    expected_share: float
    """Equal or from ``--weights``."""
    served: int
    """Routed requests attributed to it."""
    routed_errors: int
    """Routed requests it served that failed."""
    failed_attempts: int
    """Routed attempts on it the router retried elsewhere."""
    routed_p50_ms: float | None
    """Median of successful routed requests it served."""
    direct: PathMetrics
    """Its direct path."""
    health: HealthMetrics | None
    """Its health endpoint."""
    counter_delta: int | None
    """Growth of its request counter (``--counter-path``)."""
    cold: ColdMetrics | None
    """Cold-start comparison."""


@dataclass(frozen=True)
class DistributionMetrics(DistributionCounts, Metrics):
    """How the router spread requests across backends."""

    max_deviation: float
    """Largest relative deviation from an expected share."""
    unknown_addresses: dict[str, int] = field(default_factory=dict)
    """Header values that matched no backend (at most 10)."""


@dataclass(frozen=True)
class TimeoutMetrics(Metrics):
    """Routed errors that end at one duration: the router's timeout."""

    timeout_ms: float | None
    """Median duration of the cluster."""
    attempts: int
    """Upstream attempts per clustered error."""
    per_attempt_ms: float | None
    """One attempt's timeout."""
    count: int
    """Errors in the cluster."""
    routed_errors: int
    """All routed errors."""
    statuses: dict[str, int]
    """Error classes in the cluster."""
    spread_ms: float | None
    """Half-width of the cluster's window."""
    backend_p99_ms: float | None
    """Slowest backend's direct p99."""
    backend_p50_ms: float | None
    """Slowest backend's direct p50."""


@dataclass(frozen=True)
class RetriesMetrics(Metrics):
    """Backend attempts against client requests (from response headers or backend counters)."""

    source: str
    """``attempt-header``, ``upstream-list`` or ``backend-counters``."""
    client_requests: int
    """Client requests counted."""
    backend_attempts: int
    """Attempts the backends saw for them."""
    extra_attempts: int
    """Attempts beyond one per request."""
    amplification: float
    """Attempts per client request."""
    retried_requests: int | None
    """Requests that took more than one attempt (header sources)."""


@dataclass(frozen=True)
class ConnectMetrics(Metrics):
    """TCP connects to one endpoint."""

    name: str
    """``router`` or the backend URL."""
    address: str
    """``host:port``."""
    attempts: int
    """Connects tried."""
    failures: dict[str, int]
    """Failed connects by class."""
    failure_rate: float
    """Failed share."""
    p50_ms: float | None
    """Median connect time."""
    p99_ms: float | None
    """p99 connect time."""
    keep_alive: bool | None
    """True when the path reused connections during the run."""
    requests_per_connection: float | None
    """Requests per TCP connection during the run."""
    syn_retransmits: int
    """Connects that completed only after a SYN retransmit."""
    syn_retransmit_ms: tuple[float, ...] = ()
    """Their times."""


@dataclass(frozen=True)
class BandwidthMetrics(Metrics):
    """iperf3 throughput to one host, or why not."""

    host: str
    """Host measured."""
    mbits_per_s: float | None
    """Received throughput."""
    reason: str | None
    """Why it was not measured."""


@dataclass(frozen=True)
class NetworkMetrics(Metrics):
    """Side probes of the network."""

    connect: tuple[ConnectMetrics, ...] = ()
    """Per endpoint, router first."""
    bandwidth: tuple[BandwidthMetrics, ...] = ()
    """iperf3 per host (``--iperf``)."""
    wakeup_delay_mean_ms: float | None = None
    """How late the prober woke from 5 ms sleeps during the run, mean (ms): the host's CPU contention."""
    wakeup_delay_p99_ms: float | None = None
    """... its 99th percentile (ms)."""


@dataclass(frozen=True)
class PlanMetrics(Metrics):
    """How the measurement was run."""

    concurrency: int
    """In-flight requests through the router."""
    direct_concurrency: int
    """In-flight requests to each backend directly."""
    per_worker: int
    """Requests per connection per slot."""
    duration_s: float
    """Requested length."""
    measured_s: float
    """Actual length of the interleaved measurement."""
    timeout_s: float
    """Per-request timeout."""
    method: str
    """HTTP method."""
    backend_header: str | None
    """``--backend-header``."""
    weights: tuple[float, ...] | None
    """``--weights``."""


@dataclass(frozen=True)
class RouteHeadline(Metrics):
    """The numbers a summary shows first (absent when not measured)."""

    requests: int = 0
    """Requests sent on all paths."""
    router_added_p50_ms: float | None = None
    """Router-added latency at p50."""
    router_added_p99_ms: float | None = None
    """Router-added latency at p99."""
    routed_p50_ms: float | None = None
    """Routed median."""
    direct_p50_ms: float | None = None
    """Direct median."""
    routed_p99_ms: float | None = None
    """Routed p99."""
    direct_p99_ms: float | None = None
    """Direct p99."""
    routed_error_rate: float | None = None
    """Failed share of routed requests."""
    direct_error_rate: float | None = None
    """Failed share of direct requests."""


@dataclass(frozen=True)
class RouteDistributions(Metrics):
    """Raw latencies of successful requests (at most 5000 per side)."""

    routed_latency_ms: tuple[float, ...] = ()
    """Through the router."""
    direct_latency_ms: tuple[float, ...] = ()
    """Straight to the backends."""


@dataclass(frozen=True)
class RouteMetrics(Metrics):
    """Metrics of ``infradoctor route``."""

    command: ClassVar[str] = "route"

    paths: tuple[PathMetrics, ...]
    """One per path, the router first."""
    attribution: AttributionMetrics
    """Router-added latency."""
    backends: tuple[BackendMetrics, ...]
    """One per ``--backend``."""
    distribution: DistributionMetrics
    """Spread across backends."""
    timeouts: TimeoutMetrics | None
    """The router's timeout, when routed errors cluster at one duration."""
    retries: RetriesMetrics | None
    """Attempts per client request, when observable from outside."""
    network: NetworkMetrics
    """Connect times and bandwidth."""
    plan: PlanMetrics
    """How the run was made."""
    headline: RouteHeadline
    """The summary numbers."""
    distributions: RouteDistributions
    """Raw latencies."""
    router_stats: RouterWindow | None = None
    """The router's own statistics over the run (``--router-stats``): counters as growth, gauges as series, hosts."""
    servers: tuple[ServerPoint, ...] = ()
    """Each model server's own metrics over the run (``--server-metrics``)."""
