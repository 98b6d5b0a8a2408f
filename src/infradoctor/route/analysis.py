"""From samples to evidence: per-path statistics, attribution, distribution, timeouts, retries, cold starts.

Pure functions over recorded samples (no I/O): the live probe and the tests feed them the same way.
Latency percentiles describe successful requests; failed requests are counted by class, and their durations are
what reveals a router timeout (:func:`find_timeout_cluster`).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from infradoctor.load import taxonomy
from infradoctor.logs.formats.layout import split_tries
from infradoctor.route.evidence import (
    DIRECT,
    ROUTER,
    Attribution,
    BackendAttribution,
    BackendStats,
    Bandwidth,
    ColdStart,
    ConnectProbe,
    Distribution,
    HealthCheck,
    PathStats,
    Retries,
    RouteEvidence,
    Sample,
    TimeoutCluster,
)
from infradoctor.route.stats import (
    chi_square_goodness_of_fit,
    mann_whitney_greater,
    quantile,
    quantile_ci,
    quantile_difference,
    quantile_differences,
)

TIMEOUT_ERROR_CLASSES = frozenset({"http_504", "http_408", taxonomy.READ_TIMEOUT})
"""Error classes that a timeout produces (router 504 / 408, or the client's own read timeout)."""

CONNECT_ERROR_CLASSES = frozenset({taxonomy.CONNECT_REFUSED, taxonomy.CONNECT_TIMEOUT, taxonomy.CONNECT_ERROR})
"""Error classes meaning no TCP connection could be made (the request never reached the server)."""

TIMEOUT_MIN_ERRORS = 3
"""A timeout cluster needs at least this many errors."""

TIMEOUT_MIN_SHARE = 0.5
"""... and at least this share of the timeout-class routed errors."""

TIMEOUT_MIN_MS = 20.0
"""Durations below this are not read as a timeout (fast failures cluster too)."""

TIMEOUT_WINDOW_FRACTION = 0.05
"""Errors within +/- this fraction of a duration (at least :data:`TIMEOUT_WINDOW_MIN_MS`) count as one cluster."""

TIMEOUT_WINDOW_MIN_MS = 15.0
"""Smallest half-width of the cluster window (ms): scheduling jitter on a busy host."""

COLD_FIRST_REQUESTS = 5
"""How many first requests to a backend are compared with the rest for a cold start."""

COLD_MIN_STEADY = 20
"""Steady-state requests needed before a cold-start comparison is made."""

PER_BACKEND_RESAMPLES = 200
"""Bootstrap resamples for each backend's added-latency interval (the pooled one uses the stats default)."""

KEEP_ALIVE_MIN_REUSE = 1.5
"""Requests per TCP connection from which a path counts as keeping connections alive."""


@dataclass(frozen=True)
class BackendTarget:
    """A ``--backend`` and the ``host:port`` spellings that identify it in an upstream header."""

    url: str
    """The URL as given."""
    addresses: frozenset[str]
    """``host:port`` forms that mean this backend (hostname and resolved addresses)."""

    @property
    def address(self) -> str:
        """The ``host:port`` of the URL itself."""
        return address_of(self.url)


@dataclass(frozen=True)
class ProbeRun:
    """What the interleaved prober recorded."""

    samples: tuple[Sample, ...]
    """Every request, all paths."""
    header: str | None = None
    """The response header that named the serving backend, when one was found."""
    duration_s: float = 0.0
    """Wall time of the measurement."""
    connections: Mapping[str, int] = field(default_factory=dict)
    """TCP connections opened per path (for requests per connection)."""
    attempt_header: str | None = None
    """The response header that carried upstream attempt counts (e.g. ``x-envoy-attempt-count``), when found."""
    gave_up: bool = False
    """True when the probe ended early because no path could be connected to for a while."""
    wakeup_delay_ms: tuple[float, ...] = ()
    """How late the prober's own process woke from short sleeps during the run (ms): the host's CPU contention, which
    every extra process on a request's path (the router) pays again."""


def address_of(url_or_value: str) -> str:
    """``host:port`` of a URL or a bare ``host:port`` value (default ports filled in, host lower-cased)."""
    text = url_or_value.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def upstream_entries(value: str) -> list[str]:
    """Every ``host:port`` in an upstream-address header value, in the order tried.

    nginx's ``$upstream_addr`` lists every upstream tried (read as the logs command reads it: ``", "`` between
    tries, ``" : "`` between internal redirects); the last one served the response, the earlier ones failed. A
    header list joined with bare commas (``a,b``) is read too.
    """
    return [address_of(e.strip()) for tried in split_tries(value) for e in tried.split(",") if e.strip()]


def parse_upstream_value(value: str) -> tuple[str, int]:
    """The serving ``host:port`` (last entry) and the number of attempts in an upstream-address header value."""
    entries = upstream_entries(value)
    return (entries[-1], len(entries)) if entries else ("", 0)


def _target_of(address: str, targets: Sequence[BackendTarget]) -> str | None:
    return next((t.url for t in targets if address in t.addresses or address == t.address), None)


def path_stats(name: str, kind: str, url: str, samples: Sequence[Sample]) -> PathStats:
    """Requests, errors by class and latency percentiles (successful requests) of one path."""
    ok_latencies = sorted(s.latency_ms for s in samples if s.ok)
    errors = Counter(s.error for s in samples if s.error is not None)
    return PathStats(
        name=name,
        kind=kind,
        url=url,
        requests=len(samples),
        ok=len(ok_latencies),
        errors=dict(sorted(errors.items())),
        p50=quantile_ci(ok_latencies, 0.50),
        p90=quantile_ci(ok_latencies, 0.90),
        p99=quantile_ci(ok_latencies, 0.99),
        mean_ms=statistics.fmean(ok_latencies) if ok_latencies else None,
        max_ms=ok_latencies[-1] if ok_latencies else None,
    )


def match_backend(
    value: str | None, targets: Sequence[BackendTarget], aliases: Mapping[str, str] | None = None
) -> tuple[str | None, str | None, int]:
    """``(backend URL or None, served address or None, attempts)`` for an upstream header value.

    ``aliases`` maps the router's own names for hosts (HAProxy server names, Envoy hostnames, read from its
    statistics) to backend URLs: ``X-Served-By: b1`` is the server HAProxy calls ``b1``, not a host ``b1:80``.
    """
    if not value:
        return None, None, 0
    if aliases:
        name = value.strip().rsplit(",", 1)[-1].strip()
        if name in aliases:
            return aliases[name], name, 1 + value.count(",")
    served, attempts = parse_upstream_value(value)
    url = _target_of(served, targets)
    if url is not None:
        return url, served, attempts
    # Headers that carry a name rather than an address (e.g. HAProxy's server name) can match a URL exactly.
    for target in targets:
        if value.strip() == target.url:
            return target.url, served, attempts
    return None, served, attempts


def attribution(
    routed: Sequence[Sample],
    direct: Sequence[Sample],
    served: Mapping[int, str],
    targets: Sequence[BackendTarget],
    *,
    seed: int = 0,
) -> Attribution:
    """Router-added latency at p50 and p99 (pooled and per backend), with bootstrap CIs and a Mann-Whitney test.

    Routed requests the router retried (more than one upstream attempt) are left out: their time includes the
    failed attempt, which is the retry's cost (R005), not the router's per-request overhead.
    """
    first_try = [i for i, s in enumerate(routed) if s.ok and (s.attempts is None or s.attempts <= 1)]
    routed_ok = [routed[i].latency_ms for i in first_try]
    direct_ok = [s.latency_ms for s in direct if s.ok]
    sorted_routed, sorted_direct = sorted(routed_ok), sorted(direct_ok)
    per_backend: list[BackendAttribution] = []
    for index, target in enumerate(targets):
        mine_routed = [routed[i].latency_ms for i in first_try if served.get(i) == target.url]
        mine_direct = [s.latency_ms for s in direct if s.ok and s.path == target.url]
        if mine_routed and mine_direct:
            mine_added = quantile_difference(
                mine_routed, mine_direct, 0.5, resamples=PER_BACKEND_RESAMPLES, seed=seed + 1 + index
            )
            per_backend.append(BackendAttribution(target.url, len(mine_routed), len(mine_direct), mine_added))
    added = quantile_differences(routed_ok, direct_ok, (0.5, 0.99), seed=seed)
    return Attribution(
        routed_n=len(routed_ok),
        direct_n=len(direct_ok),
        routed_p50_ms=quantile(sorted_routed, 0.5),
        direct_p50_ms=quantile(sorted_direct, 0.5),
        routed_p99_ms=quantile(sorted_routed, 0.99),
        direct_p99_ms=quantile(sorted_direct, 0.99),
        added_p50=added[0.5],
        added_p99=added[0.99],
        p_value=mann_whitney_greater(routed_ok, direct_ok),
        per_backend=tuple(per_backend),
    )


def expected_shares(urls: Sequence[str], weights: Sequence[float] | None) -> dict[str, float]:
    """Each backend's expected share: equal, or proportional to ``weights`` (one per backend)."""
    if not urls:
        return {}
    if weights is None or len(weights) != len(urls) or sum(weights) <= 0:
        return {u: 1.0 / len(urls) for u in urls}
    total = float(sum(weights))
    return {u: w / total for u, w in zip(urls, weights, strict=True)}


def distribution(
    counts: Mapping[str, int],
    shares: Mapping[str, float],
    *,
    header: str | None,
    unattributed: int,
    weights_source: str,
    unknown: Mapping[str, int] | None = None,
) -> Distribution:
    """Served counts against expected shares, with Pearson's chi-square."""
    urls = list(shares)
    observed = [counts.get(u, 0) for u in urls]
    chi2, df, p_value = chi_square_goodness_of_fit(observed, [shares[u] for u in urls])
    return Distribution(
        header=header,
        attributed=sum(observed),
        unattributed=unattributed,
        counts={u: counts.get(u, 0) for u in urls},
        expected_shares=dict(shares),
        weights_source=weights_source,
        chi_square=chi2,
        df=df,
        p_value=p_value,
        unknown_addresses=dict(Counter(unknown or {}).most_common(10)),
    )


def find_timeout_cluster(
    errors: Sequence[Sample], *, backend_p99_ms: float | None = None, backend_p50_ms: float | None = None
) -> TimeoutCluster | None:
    """The fixed duration that timeout-class errors pile up at, or None when they do not cluster."""
    timeouts = sorted((s for s in errors if s.error in TIMEOUT_ERROR_CLASSES), key=lambda s: s.latency_ms)
    if len(timeouts) < TIMEOUT_MIN_ERRORS:
        return None
    durations = [s.latency_ms for s in timeouts]
    best_start, best_end = 0, 0
    start = 0
    for end, value in enumerate(durations):
        # The window is anchored at its smallest value so that a cluster's width scales with its duration.
        while durations[start] < value - 2 * _window(durations[start]):
            start += 1
        if end - start > best_end - best_start:
            best_start, best_end = start, end
    cluster = timeouts[best_start : best_end + 1]
    count = len(cluster)
    centre = statistics.median(s.latency_ms for s in cluster)
    if count < TIMEOUT_MIN_ERRORS or count < TIMEOUT_MIN_SHARE * len(timeouts) or centre < TIMEOUT_MIN_MS:
        return None
    spread = max(abs(s.latency_ms - centre) for s in cluster)
    return TimeoutCluster(
        timeout_ms=centre,
        count=count,
        routed_errors=len(errors),
        statuses=dict(Counter(s.error or "" for s in cluster)),
        spread_ms=spread,
        backend_p99_ms=backend_p99_ms,
        backend_p50_ms=backend_p50_ms,
        attempts=int(statistics.median(s.attempts or 1 for s in cluster)),
    )


def _window(value: float) -> float:
    return max(TIMEOUT_WINDOW_MIN_MS, TIMEOUT_WINDOW_FRACTION * value)


def cold_start(samples: Iterable[Sample]) -> ColdStart | None:
    """First successful requests to a backend (by send time, routed or direct) against its steady state.

    Routed and direct requests differ by the router's overhead, so each of the first requests is compared with the
    steady median of its own path and expressed on the direct path's scale (``steady_p50_ms`` is the direct
    steady median when there is one).
    """
    ordered = sorted((s for s in samples if s.ok), key=lambda s: s.started_s)
    if len(ordered) < COLD_FIRST_REQUESTS + COLD_MIN_STEADY:
        return None
    first, rest = ordered[:COLD_FIRST_REQUESTS], ordered[COLD_FIRST_REQUESTS:]
    steady: dict[str, float] = {}
    for kind in (DIRECT, ROUTER):
        values = [s.latency_ms for s in rest if s.kind == kind]
        if len(values) >= COLD_FIRST_REQUESTS:
            steady[kind] = statistics.median(values)
    if not steady:
        return None
    reference = steady.get(DIRECT, steady.get(ROUTER, 0.0))
    adjusted = [s.latency_ms - steady.get(s.kind, reference) + reference for s in first]
    return ColdStart(
        first_n=len(first),
        first_p50_ms=statistics.median(adjusted),
        steady_p50_ms=reference,
        first_max_ms=max(adjusted),
    )


def retries_from_headers(routed: Sequence[Sample], *, attempt_header_seen: bool) -> Retries | None:
    """Attempts per routed request from an attempt-count header, or from multi-valued upstream lists."""
    counted = [s for s in routed if s.attempts is not None and s.attempts > 0]
    if not counted:
        return None
    if not attempt_header_seen and all(s.attempts == 1 for s in counted):
        return None  # a single address per response says nothing about retries unless the router lists them
    return Retries(
        source="attempt-header" if attempt_header_seen else "upstream-list",
        client_requests=len(counted),
        backend_attempts=sum(s.attempts or 0 for s in counted),
        retried_requests=sum(1 for s in counted if (s.attempts or 0) > 1),
    )


def retries_from_counters(
    routed: Sequence[Sample], direct: Sequence[Sample], counter_deltas: Mapping[str, int | None]
) -> Retries | None:
    """Backend request counters against what the client sent (direct requests that reached a backend subtracted)."""
    if not counter_deltas or any(v is None for v in counter_deltas.values()):
        return None
    reached_directly = sum(1 for s in direct if s.error not in CONNECT_ERROR_CLASSES and s.path in counter_deltas)
    client_routed = sum(1 for s in routed if s.error not in CONNECT_ERROR_CLASSES)
    backend_routed = sum(v or 0 for v in counter_deltas.values()) - reached_directly
    if client_routed == 0:
        return None
    return Retries(source="backend-counters", client_requests=client_routed, backend_attempts=max(0, backend_routed))


def analyze(
    run: ProbeRun,
    *,
    router_url: str,
    targets: Sequence[BackendTarget],
    weights: Sequence[float] | None = None,
    health: Mapping[str, HealthCheck] | None = None,
    counter_deltas: Mapping[str, int | None] | None = None,
    connect: Sequence[ConnectProbe] = (),
    bandwidth: Sequence[Bandwidth] = (),
    client_timeout_s: float = 30.0,
    seed: int = 0,
    aliases: Mapping[str, str] | None = None,
) -> RouteEvidence:
    """All route evidence from one probe run and the side measurements."""
    routed = [s for s in run.samples if s.kind == ROUTER]
    direct = [s for s in run.samples if s.kind == DIRECT]
    served: dict[int, str] = {}
    unknown: Counter[str] = Counter()
    unattributed = 0
    failed_attempts: Counter[str] = Counter()
    for index, sample in enumerate(routed):
        if sample.served_by and "," in sample.served_by:
            for tried in upstream_entries(sample.served_by)[:-1]:
                failed = _target_of(tried, targets)
                if failed is not None:
                    failed_attempts[failed] += 1
        url, address, _ = match_backend(sample.served_by, targets, aliases)
        if url is not None:
            served[index] = url
        else:
            unattributed += 1
            if address:
                unknown[address] += 1
    urls = [t.url for t in targets]
    shares = expected_shares(urls, weights)
    counts = Counter(served.values())
    direct_by_url = {u: [s for s in direct if s.path == u] for u in urls}
    direct_stats = {u: path_stats(u, DIRECT, u, direct_by_url[u]) for u in urls}
    backends: list[BackendStats] = []
    for target in targets:
        mine = [routed[i] for i, u in served.items() if u == target.url]
        mine_ok = sorted(s.latency_ms for s in mine if s.ok)
        total = len(served)
        backends.append(
            BackendStats(
                url=target.url,
                address=target.address,
                direct=direct_stats[target.url],
                served=counts.get(target.url, 0),
                share=counts.get(target.url, 0) / total if total else None,
                expected_share=shares[target.url],
                routed_errors=sum(1 for s in mine if not s.ok),
                failed_attempts=failed_attempts.get(target.url, 0),
                routed_p50_ms=quantile(mine_ok, 0.5),
                health=(health or {}).get(target.url),
                counter_delta=(counter_deltas or {}).get(target.url),
                cold=cold_start([*mine, *direct_by_url[target.url]]),
            )
        )
    slowest_p99 = max((b.direct.p99.value for b in backends if b.direct.p99.value is not None), default=None)
    slowest_p50 = max((b.direct.p50.value for b in backends if b.direct.p50.value is not None), default=None)
    retries = retries_from_headers(routed, attempt_header_seen=run.attempt_header is not None) or retries_from_counters(
        routed, direct, counter_deltas or {}
    )
    requests_per_connection = {
        path: sum(1 for s in run.samples if s.path == path) / opened
        for path, opened in run.connections.items()
        if opened > 0
    }
    connect_probes = tuple(
        replace(
            p,
            requests_per_connection=requests_per_connection[p.name],
            keep_alive=requests_per_connection[p.name] >= KEEP_ALIVE_MIN_REUSE,
        )
        if p.name in requests_per_connection
        else p
        for p in connect
    )
    return RouteEvidence(
        router_url=router_url,
        router=path_stats(ROUTER, ROUTER, router_url, routed),
        backends=tuple(backends),
        attribution=attribution(routed, direct, served, targets, seed=seed),
        distribution=distribution(
            counts,
            shares,
            header=run.header,
            unattributed=unattributed,
            weights_source="--weights" if weights else "equal",
            unknown=unknown,
        ),
        timeout=find_timeout_cluster(
            [s for s in routed if not s.ok], backend_p99_ms=slowest_p99, backend_p50_ms=slowest_p50
        ),
        retries=retries,
        connect=connect_probes,
        bandwidth=tuple(bandwidth),
        client_timeout_s=client_timeout_s,
        duration_s=run.duration_s,
        wakeup_delay_mean_ms=statistics.fmean(run.wakeup_delay_ms) if run.wakeup_delay_ms else None,
        wakeup_delay_p99_ms=quantile(sorted(run.wakeup_delay_ms), 0.99) if run.wakeup_delay_ms else None,
    )
