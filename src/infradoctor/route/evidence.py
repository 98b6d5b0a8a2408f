"""What ``infradoctor route`` measures: raw samples and the evidence the rules read (frozen dataclasses).

A :class:`Sample` is one request on one path (through the router, or straight to one backend). The analysis
(:mod:`infradoctor.route.analysis`) turns samples, health checks, counters and connect probes into a
:class:`RouteEvidence`; the rules under :mod:`infradoctor.route.rules` read only that, so they run the same on live
and on hand-built evidence. Every ``to_dict`` is the JSON shape stored in ``metrics``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infradoctor.route.stats import NA, Estimate
from infradoctor.telemetry.evidence import RouterEvidence, ServerEvidence

ROUTER = "router"
"""``Sample.kind`` of a request sent through the router."""
DIRECT = "direct"
"""``Sample.kind`` of a request sent straight to one backend."""


@dataclass(frozen=True)
class Sample:
    """One request on one path."""

    path: str
    """Path name: ``router`` or the backend URL the request went to directly."""
    kind: str
    """``router`` or ``direct``."""
    seq: int
    """Order of this request within its path (0 = first)."""
    started_s: float
    """Send time in seconds since the start of the run."""
    latency_ms: float
    """Time from send to the complete response (or to the error) in milliseconds."""
    status: int | None
    """HTTP status, None when no response arrived."""
    error: str | None
    """Error class (``connect_refused``, ``read_timeout``, ``http_503``, ...), None for a successful request."""
    served_by: str | None = None
    """Raw value of the response header that names the upstream (routed requests), None when absent."""
    attempts: int | None = None
    """Upstream attempts the router reported for this request (attempt-count header or address list), if any."""

    @property
    def ok(self) -> bool:
        """True for a successful request."""
        return self.error is None


@dataclass(frozen=True)
class PathStats:
    """Latency and errors of one path."""

    name: str
    """``router`` or the backend URL."""
    kind: str
    """``router`` or ``direct``."""
    url: str
    """The URL requests were sent to."""
    requests: int
    """Requests sent."""
    ok: int
    """Requests that succeeded (2xx/3xx)."""
    errors: Mapping[str, int]
    """Failed requests by error class."""
    p50: Estimate = NA
    """Median latency of successful requests (ms) with its 95% CI."""
    p90: Estimate = NA
    """90th percentile (ms) with CI."""
    p99: Estimate = NA
    """99th percentile (ms) with CI."""
    mean_ms: float | None = None
    """Mean latency of successful requests (ms)."""
    max_ms: float | None = None
    """Largest latency of a successful request (ms)."""

    @property
    def error_count(self) -> int:
        """Failed requests."""
        return sum(self.errors.values())

    @property
    def error_rate(self) -> float:
        """Failed share of requests (0 without requests)."""
        return self.error_count / self.requests if self.requests else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form (one entry of ``metrics.paths``)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "url": self.url,
            "requests": self.requests,
            "ok": self.ok,
            "errors": dict(self.errors),
            "error_rate": round(self.error_rate, 6),
            "p50_ms": self.p50.to_dict(),
            "p90_ms": self.p90.to_dict(),
            "p99_ms": self.p99.to_dict(),
            "mean_ms": _r(self.mean_ms),
            "max_ms": _r(self.max_ms),
        }


@dataclass(frozen=True)
class BackendAttribution:
    """Router-added latency for the routed requests one backend served."""

    backend: str
    """Backend URL."""
    routed_n: int
    """Successful routed requests this backend served."""
    direct_n: int
    """Successful direct requests to it."""
    added_p50: Estimate
    """Routed p50 minus direct p50 for this backend (ms), with CI."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "backend": self.backend,
            "routed_n": self.routed_n,
            "direct_n": self.direct_n,
            "added_p50_ms": self.added_p50.to_dict(),
        }


@dataclass(frozen=True)
class AttributionCounts:
    """What the router-added latency is measured on: the requests compared and their medians and tails."""

    routed_n: int
    """Successful routed requests compared (requests the router retried are left out)."""
    direct_n: int
    """Successful direct requests compared (all backends pooled)."""
    routed_p50_ms: float | None
    """Routed median (ms)."""
    direct_p50_ms: float | None
    """Direct median, backends pooled (ms)."""
    routed_p99_ms: float | None
    """Routed p99 (ms)."""
    direct_p99_ms: float | None
    """Direct p99, backends pooled (ms)."""


@dataclass(frozen=True)
class Attribution(AttributionCounts):
    """How much latency the router adds: routed minus direct, at the median and the tail."""

    added_p50: Estimate
    """Router-added latency at p50 (ms) with a bootstrap 95% CI."""
    added_p99: Estimate
    """Router-added latency at p99 (ms) with a bootstrap 95% CI."""
    p_value: float | None
    """One-sided Mann-Whitney p-value that routed latencies are larger than direct ones."""
    per_backend: tuple[BackendAttribution, ...] = ()
    """The same comparison per backend, where the serving backend was identified."""

    @property
    def added_fraction_p50(self) -> float | None:
        """Share of the routed median that the router adds (None without data)."""
        if self.added_p50.value is None or not self.routed_p50_ms:
            return None
        return self.added_p50.value / self.routed_p50_ms

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``metrics.attribution``)."""
        frac = self.added_fraction_p50
        return {
            "routed_n": self.routed_n,
            "direct_n": self.direct_n,
            "routed_p50_ms": _r(self.routed_p50_ms),
            "direct_p50_ms": _r(self.direct_p50_ms),
            "routed_p99_ms": _r(self.routed_p99_ms),
            "direct_p99_ms": _r(self.direct_p99_ms),
            "added_p50_ms": self.added_p50.to_dict(),
            "added_p99_ms": self.added_p99.to_dict(),
            "added_fraction_p50": None if frac is None else round(frac, 4),
            "p_value": None if self.p_value is None else float(f"{self.p_value:.3g}"),
            "per_backend": [b.to_dict() for b in self.per_backend],
        }


@dataclass(frozen=True)
class HealthCheck:
    """One backend's health endpoint, as the router's health check would see it."""

    url: str
    """The health URL that was asked (the first that answered, or the last tried)."""
    status: int | None
    """HTTP status, None when nothing answered."""
    healthy: bool
    """True for a 2xx answer."""
    latency_ms: float | None
    """Time to the answer (ms)."""
    error: str | None = None
    """Why it failed, when it did."""
    tried: tuple[str, ...] = ()
    """Every path tried, in order."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "url": self.url,
            "status": self.status,
            "healthy": self.healthy,
            "latency_ms": _r(self.latency_ms),
            "error": self.error,
            "tried": list(self.tried),
        }


@dataclass(frozen=True)
class ColdStart:
    """First requests to a backend against its steady state."""

    first_n: int
    """How many first requests were compared."""
    first_p50_ms: float
    """Median of the first requests (ms), routed ones shifted by the routed-direct difference."""
    steady_p50_ms: float
    """Median of the rest on the direct path (ms; the routed path when no direct request succeeded)."""
    first_max_ms: float
    """Slowest of the first requests (ms), shifted like ``first_p50_ms``."""

    @property
    def ratio(self) -> float:
        """First over steady median."""
        return self.first_p50_ms / self.steady_p50_ms if self.steady_p50_ms > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "first_n": self.first_n,
            "first_p50_ms": _r(self.first_p50_ms),
            "steady_p50_ms": _r(self.steady_p50_ms),
            "first_max_ms": _r(self.first_max_ms),
            "ratio": _r(self.ratio),
        }


@dataclass(frozen=True)
class BackendStats:
    """Everything measured about one backend."""

    url: str
    """Backend URL as given with ``--backend``."""
    address: str
    """``host:port`` used to match the upstream header."""
    direct: PathStats
    """Its direct path."""
    served: int
    """Routed requests the upstream header attributed to it."""
    share: float | None
    """Its share of attributed routed requests (None when no request was attributed)."""
    expected_share: float
    """Share it should get: equal, or from ``--weights``."""
    routed_errors: int
    """Routed requests attributed to it that failed."""
    routed_p50_ms: float | None
    """Median of successful routed requests it served (ms)."""
    failed_attempts: int = 0
    """Routed attempts on it that the router retried elsewhere (earlier entries of an upstream-address list)."""
    health: HealthCheck | None = None
    """Its health endpoint, when audited."""
    counter_delta: int | None = None
    """Growth of its request counter over the run (``--counter-path``), when read."""
    cold: ColdStart | None = None
    """First direct requests against steady state, when there were enough."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (one entry of ``metrics.backends``)."""
        return {
            "url": self.url,
            "address": self.address,
            "share": None if self.share is None else round(self.share, 4),
            "expected_share": round(self.expected_share, 4),
            "served": self.served,
            "routed_errors": self.routed_errors,
            "failed_attempts": self.failed_attempts,
            "routed_p50_ms": _r(self.routed_p50_ms),
            "direct": self.direct.to_dict(),
            "health": self.health.to_dict() if self.health else None,
            "counter_delta": self.counter_delta,
            "cold": self.cold.to_dict() if self.cold else None,
        }


@dataclass(frozen=True)
class DistributionCounts:
    """How the router spread requests across backends: what the evidence and the stored metrics both hold."""

    header: str | None
    """Response header used to identify the serving backend (None: none found)."""
    attributed: int
    """Routed requests matched to a ``--backend``."""
    unattributed: int
    """Routed requests without a usable header, or naming an address that is not a ``--backend``."""
    counts: Mapping[str, int]
    """Served requests per backend URL."""
    expected_shares: Mapping[str, float]
    """Expected share per backend URL (equal or ``--weights``)."""
    weights_source: str
    """``equal`` or ``--weights``."""
    chi_square: float
    """Pearson's statistic of counts against expected shares."""
    df: int
    """Degrees of freedom."""
    p_value: float
    """Chi-square p-value (small: the spread is not what was expected)."""


@dataclass(frozen=True)
class Distribution(DistributionCounts):
    """How the router spread requests across backends."""

    unknown_addresses: Mapping[str, int] = field(default_factory=dict)
    """Header values that matched no ``--backend``, with counts (at most 10)."""

    @property
    def max_deviation(self) -> float:
        """Largest relative deviation of a backend's share from its expected share (0.5 = 50% off)."""
        if not self.attributed:
            return 0.0
        worst = 0.0
        for url, expected in self.expected_shares.items():
            if expected > 0:
                worst = max(worst, abs(self.counts.get(url, 0) / self.attributed - expected) / expected)
        return worst

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``metrics.distribution``)."""
        return {
            "header": self.header,
            "attributed": self.attributed,
            "unattributed": self.unattributed,
            "counts": dict(self.counts),
            "expected_shares": {k: round(v, 4) for k, v in self.expected_shares.items()},
            "weights_source": self.weights_source,
            "chi_square": round(self.chi_square, 3),
            "df": self.df,
            "p_value": float(f"{self.p_value:.3g}"),
            "max_deviation": round(self.max_deviation, 4),
            "unknown_addresses": dict(self.unknown_addresses),
        }


@dataclass(frozen=True)
class TimeoutCluster:
    """Routed errors that end at one fixed duration: the router's timeout, revealed."""

    timeout_ms: float
    """Median duration of the clustered errors (ms): the inferred router timeout."""
    count: int
    """Errors in the cluster."""
    routed_errors: int
    """All routed errors."""
    statuses: Mapping[str, int]
    """Error classes in the cluster."""
    spread_ms: float
    """Half-width of the window the cluster lies in (ms)."""
    backend_p99_ms: float | None
    """Slowest backend's direct p99 (ms), for comparison."""
    backend_p50_ms: float | None
    """Slowest backend's direct p50 (ms)."""
    attempts: int = 1
    """Upstream attempts per clustered error (median; >1 when the router retried after each timeout)."""

    @property
    def per_attempt_ms(self) -> float:
        """The timeout of one upstream attempt: the cluster's duration over the attempts it spans."""
        return self.timeout_ms / max(1, self.attempts)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``metrics.timeouts``)."""
        return {
            "timeout_ms": _r(self.timeout_ms),
            "attempts": self.attempts,
            "per_attempt_ms": _r(self.per_attempt_ms),
            "count": self.count,
            "routed_errors": self.routed_errors,
            "statuses": dict(self.statuses),
            "spread_ms": _r(self.spread_ms),
            "backend_p99_ms": _r(self.backend_p99_ms),
            "backend_p50_ms": _r(self.backend_p50_ms),
        }


@dataclass(frozen=True)
class Retries:
    """Backend attempts against client requests."""

    source: str
    """Where attempts were counted: ``attempt-header``, ``upstream-list`` or ``backend-counters``."""
    client_requests: int
    """Requests the client sent through the router (in the counted set)."""
    backend_attempts: int
    """Attempts the backends saw for them."""
    retried_requests: int | None = None
    """Client requests that took more than one attempt (header sources only)."""

    @property
    def extra_attempts(self) -> int:
        """Attempts beyond one per client request."""
        return max(0, self.backend_attempts - self.client_requests)

    @property
    def amplification(self) -> float:
        """Backend attempts per client request."""
        return self.backend_attempts / self.client_requests if self.client_requests else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``metrics.retries``)."""
        return {
            "source": self.source,
            "client_requests": self.client_requests,
            "backend_attempts": self.backend_attempts,
            "extra_attempts": self.extra_attempts,
            "amplification": round(self.amplification, 4),
            "retried_requests": self.retried_requests,
        }


@dataclass(frozen=True)
class ConnectProbe:
    """TCP connect times to one endpoint, and whether it keeps connections alive."""

    name: str
    """``router`` or the backend URL."""
    address: str
    """``host:port`` connected to."""
    attempts: int
    """Connects tried."""
    failures: Mapping[str, int]
    """Failed connects by class (``connect_refused``, ``connect_timeout``, ...)."""
    p50_ms: float | None
    """Median connect time (ms)."""
    p99_ms: float | None
    """99th percentile connect time (ms)."""
    keep_alive: bool | None = None
    """True when the path served several requests per connection during the run; None when not measured."""
    requests_per_connection: float | None = None
    """Requests per TCP connection the prober saw on this path during the run."""
    syn_retransmits: int = 0
    """Connects that succeeded only after a SYN retransmission (took ~1 s or ~3 s): a dropped SYN or SYN-ACK (full
    accept queue, packet loss), not a failure."""
    syn_retransmit_ms: tuple[float, ...] = ()
    """How long each of those connects took (ms)."""

    @property
    def failure_rate(self) -> float:
        """Failed share of connects."""
        return sum(self.failures.values()) / self.attempts if self.attempts else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form (one entry of ``metrics.network.connect``)."""
        return {
            "name": self.name,
            "address": self.address,
            "attempts": self.attempts,
            "failures": dict(self.failures),
            "failure_rate": round(self.failure_rate, 4),
            "p50_ms": _r(self.p50_ms),
            "p99_ms": _r(self.p99_ms),
            "keep_alive": self.keep_alive,
            "requests_per_connection": _r(self.requests_per_connection),
            "syn_retransmits": self.syn_retransmits,
            "syn_retransmit_ms": list(self.syn_retransmit_ms),
        }


@dataclass(frozen=True)
class Bandwidth:
    """iperf3 throughput to one host, or why it was not measured."""

    host: str
    """Host measured."""
    mbits_per_s: float | None
    """Received throughput (Mbit/s), None when not measured."""
    reason: str | None = None
    """Why it was not measured (no iperf3 binary, no server answering)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"host": self.host, "mbits_per_s": _r(self.mbits_per_s), "reason": self.reason}


@dataclass(frozen=True)
class RouteEvidence:
    """Everything the route rules read."""

    router_url: str
    """The router URL requests were sent through."""
    router: PathStats
    """The routed path."""
    backends: tuple[BackendStats, ...]
    """One entry per ``--backend``, in the order given."""
    attribution: Attribution
    """Router-added latency."""
    distribution: Distribution
    """Spread across backends."""
    timeout: TimeoutCluster | None = None
    """Routed errors clustered at one duration, when found."""
    retries: Retries | None = None
    """Backend attempts against client requests, when observable."""
    connect: tuple[ConnectProbe, ...] = ()
    """TCP connect probes, router first."""
    bandwidth: tuple[Bandwidth, ...] = ()
    """iperf3 results (``--iperf``)."""
    client_timeout_s: float = 30.0
    """The client's own per-request timeout (s)."""
    duration_s: float = 0.0
    """Wall time of the interleaved measurement (s)."""
    wakeup_delay_mean_ms: float | None = None
    """Mean of how late the prober woke from short sleeps (ms): the host's CPU contention during the run."""
    wakeup_delay_p99_ms: float | None = None
    """Their 99th percentile (ms)."""
    router_stats: RouterEvidence | None = None
    """The router's own statistics over the run (``--router-stats``), when read."""
    servers: tuple[ServerEvidence, ...] = ()
    """Model servers' own metrics over the run (``--server-metrics``)."""

    def backend(self, url: str) -> BackendStats | None:
        """The backend with this URL."""
        return next((b for b in self.backends if b.url == url), None)


def _r(value: float | None) -> float | None:
    return None if value is None or value != value or value in (float("inf"), float("-inf")) else round(value, 4)
