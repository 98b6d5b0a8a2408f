"""R001 router-overhead: the router itself adds significant latency.

What it detects:
    The router itself adds latency. From ``infradoctor route``: requests through the router are slower than the same
    requests sent straight to the backends, interleaved in time, by a margin that is both statistically significant
    and material, at the median or at the tail (p99). From logs (``infradoctor logs``): the time the router logs on
    top of its upstream's (nginx ``$request_time`` minus ``$upstream_response_time``, Envoy ``%DURATION%`` minus
    ``x-envoy-upstream-service-time``, HAProxy ``Ta`` minus ``Tr``) is a large share of the request time.

Why it matters:
    When routed latency is high, the backends are usually blamed and scaled. If the time is spent in the router (its
    CPU or workers, connection setup per request, buffering the body, queueing for an upstream connection, waiting
    for a slow client), more backends will not help.

How it is measured:
    Router-added latency = routed quantile minus direct quantile (backends pooled), with a seeded 95% bootstrap
    interval. It is reported at p50 when the interval's lower end is above zero and the estimate is at least
    ``MIN_ADDED_MS`` and ``MIN_ADDED_FRACTION`` of the direct median; at p99 when the interval's lower end itself
    is at least ``TAIL_MIN_ADDED_MS`` and ``TAIL_MIN_FRACTION`` of the direct p99 (the tail is decided by a few
    samples), with ``TAIL_MIN_SAMPLES`` routed requests. Each side needs ``MIN_SAMPLES`` successful requests.
    When the pooled comparison shows nothing, the same test runs per backend (routed requests it served against
    direct ones to it), which finds a slow hop from the router to one node. The difference includes the extra
    network hop through the router; run the probe from a host on the same
    network as the router and the backends (the TCP connect times in ``metrics.network`` show each hop's cost).
    Retries are not router time: when the router retried (R005 fires: ``MIN_AMPLIFICATION`` backend attempts per
    client request or more), the routed requests it did not retry still share the backends with the retried
    attempts, a load the direct path does not carry (with half of one backend's attempts retried on the other,
    that one serves 1.5x the direct load), so routed minus direct measures that extra load and scheduling noise,
    not the router's per-request cost; the rule then stays silent and R005 reports the retries (with the added
    latency in its evidence). Without this, a 2 ms difference under retries on a busy machine read as overhead.
    On a host short of CPU, every process on a request's path waits to be scheduled, and the router is one more:
    the prober measures how late its own process wakes from short sleeps during the run, and added latency up to
    ``WAKEUPS_PER_REQUEST`` times that mean (the router wakes for the request and for the response) is the host's,
    not the router's, and at p99 up to that many times the wake-up delay's own p99; the rule's thresholds rise to
    them (the evidence carries the allowance, and a note says when it applied). Run the probe on a host with CPU
    to spare to judge a router by a few milliseconds.
    With ``--router-stats``, time the router spent on retries (its retry counters at ``RETRY_SHARE`` of the
    requests: backoff and failed attempts) or with requests in its pending queue (``QUEUE_SHARE``) is not its
    per-request overhead (R005 and R009 report it): where the router's statistics give that time, it is
    subtracted from the added latency at p50 (its value and interval) and the rest is judged as above, at p50
    only (the tail is where the retried and queued requests are). Envoy retries after connection failures (its
    ``upstream_rq_retry_backoff_*`` counters count every retry's back-off and ``upstream_cx_connect_fail`` the
    failed attempts, which cost no time of their own): a retried request waited a random back-off below
    ``ENVOY_BACKOFF_BASE_MS`` for its first retry (mean half of it) and below three times that for the second;
    the subtracted time is the mean back-off of one retried request (retried requests:
    ``upstream_rq_retry_success`` plus ``retry_limit_exceeded``), the base interval taken as Envoy's default.
    HAProxy's queue: ``qtime``, the mean queue time over its last 1,024 requests, queued or not; the median
    moves only when half the requests or more waited, and then each waited at most twice the mean:
    ``QUEUE_TIME_FACTOR`` times the largest ``qtime`` read is subtracted. Subtracting the time of one retried or
    queued request from the p50 over-counts when few were (their time reaches the median only when half were),
    so what remains is the router's own cost or less. Where the time cannot be separated (HAProxy retries, Envoy
    retries after 5xx or resets, whose failed attempts took a backend's time, connect timeouts, Envoy's pending
    queue, which reports no wait time), the rule stays silent as before.

    From logs (`infradoctor logs`): Per request with exactly one upstream attempt and both times logged, the
    difference in whole ms into a histogram; the finding fires when its p99 is at least :data:`OVERHEAD_P99_MS` (100
    ms) and at least :data:`OVERHEAD_SHARE` (20%) of the request p99 (at least ``min_requests`` such requests).

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor route``) or ``logs``.
    - ``added_p50_ms``: the time the router adds at the median (ms): routed minus direct p50, less the router's
      retry back-off and queue wait where they were taken out; from logs the median of the router's own time per
      request.
    - ``added_p99_ms``: the same at p99 (ms); None for one backend's path (judged at p50 only).
    - ``requests``: the requests it rests on: successful routed requests (to that backend, for one backend's
      path); from logs the requests with one upstream attempt that log both times.

    From the probe also: ``added_p50_ms_ci`` and ``added_p99_ms_ci`` (95% bootstrap intervals, ``[low, high]``),
    ``routed_p50_ms``, ``direct_p50_ms``, ``routed_p99_ms``, ``direct_p99_ms``, ``added_fraction_p50`` (added over
    the direct median), ``p_value``, ``direct_n``, ``per_backend_added_p50_ms``, ``host_allowance_ms`` and
    ``router``; ``backend`` for one backend's path; where the router's retry back-off or queue wait was taken out,
    ``measured_added_p50_ms`` (and its ``_ci``) before that, ``subtracted_ms`` by cause and ``router_stats``.

    From logs also: ``request_p99_ms``, ``upstream_p99_ms`` and ``share_of_request_p99`` (``added_p99_ms`` over
    ``request_p99_ms``).

Fix:
    Scale the router (more workers/replicas, CPU); enable upstream keep-alive and connection pooling (nginx
    ``keepalive`` in the upstream block with ``proxy_http_version 1.1``); turn off request/response buffering for
    streaming endpoints; check filters, rate limits or auth calls the router makes per request, and whether slow
    clients (large uploads) make the difference.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions, estimate
from infradoctor.route.rules._router import QUEUE_SHARE, RETRY_SHARE, counter, gauge_max, queued_share, retry_share
from infradoctor.route.rules.r005_retry_amplification import MIN_AMPLIFICATION, MIN_EXTRA_ATTEMPTS
from infradoctor.route.stats import Estimate
from infradoctor.telemetry.evidence import RouterEvidence

RULE = Rule(
    "R001",
    "router-overhead",
    Severity.HIGH,
    "The router adds significant latency",
    fix="Scale the router, enable upstream keep-alive and connection pooling, check its CPU and buffering.",
    risk="Connection pools hold sockets on the backends.",
    commands=("route", "logs"),
)

MIN_SAMPLES = 20
"""Successful requests needed on each side."""

MIN_ADDED_MS = 2.0
"""Smallest router-added median (ms) worth reporting."""

MIN_ADDED_FRACTION = 0.2
"""... and its smallest share of the direct median."""

TAIL_MIN_ADDED_MS = 10.0
"""Smallest router-added p99 (ms) worth reporting."""

TAIL_MIN_FRACTION = 0.5
"""... and its smallest share of the direct p99."""

TAIL_MIN_SAMPLES = 200
"""Successful routed requests needed before the p99 is judged."""

WAKEUPS_PER_REQUEST = 2.0
"""Times a router process is woken per proxied request (request in, response back): the host's mean wake-up delay
times this is latency a CPU-starved host adds to any extra hop."""


ENVOY_BACKOFF_BASE_MS = 25.0
"""Envoy's default retry back-off base interval: the k-th retry of a request waits a random time below
(2^k - 1) times it (first retry 0-25 ms, second 0-75 ms), up to ten times it."""

QUEUE_TIME_FACTOR = 2.0
"""HAProxy's ``qtime`` is a mean over queued and unqueued requests: when half or more waited (only then does the
median move), each waited at most this many times the mean."""


def separable_ms(stats: RouterEvidence) -> tuple[dict[str, float], str | None]:
    """Time at p50 the router's retries and queue account for (ms, by cause), or why it cannot be separated.

    Empty when the router retried and queued too little to matter (below ``RETRY_SHARE`` and ``QUEUE_SHARE``).
    """
    parts: dict[str, float] = {}
    kind = stats.window.kind
    if retry_share(stats) >= RETRY_SHARE:
        retries, backoffs = counter(stats, "retries"), counter(stats, "retry_backoff")
        if kind != "envoy" or backoffs < retries:
            return parts, f"{kind} does not count its retries' time"
        if counter(stats, "connect_timeout") > 0 or counter(stats, "connect_fail") < retries:
            return parts, "retried attempts took time of their own (connect timeouts, 5xx or resets)"
        retried = min(backoffs, counter(stats, "retry_success") + counter(stats, "retry_limit_exceeded")) or backoffs
        first, later = ENVOY_BACKOFF_BASE_MS / 2, 3 * ENVOY_BACKOFF_BASE_MS / 2  # mean back-off of 1st, 2nd retry
        parts["retry_backoff"] = (first * retried + later * (backoffs - retried)) / retried
    if queued_share(stats) >= QUEUE_SHARE or counter(stats, "pending_overflow") > 0:
        if kind != "haproxy" or "queue_time_ms" not in stats.window.gauges:
            return parts, f"{kind} does not report its requests' queue time"
        parts["queue_wait"] = QUEUE_TIME_FACTOR * gauge_max(stats, "queue_time_ms")
    return parts, None


def _less(estimate: Estimate, ms: float) -> Estimate:
    def minus(value: float | None) -> float | None:
        return None if value is None else value - ms

    return Estimate(minus(estimate.value), minus(estimate.low), minus(estimate.high))


def host_allowance_ms(evidence: RouteEvidence) -> float:
    """Added median latency the host's CPU contention explains for one more process on the path (ms)."""
    return WAKEUPS_PER_REQUEST * (evidence.wakeup_delay_mean_ms or 0.0)


def host_tail_allowance_ms(evidence: RouteEvidence) -> float:
    """... and added p99 latency (the wake-up delay's own p99, twice)."""
    return WAKEUPS_PER_REQUEST * (evidence.wakeup_delay_p99_ms or 0.0)


@RULE.check(RouteEvidence, RuleOptions)
def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R001 when the router adds significant latency at p50 or p99."""
    att = evidence.attribution
    stats = evidence.router_stats
    subtracted: dict[str, float] = {}
    if stats is not None:
        subtracted, unseparable = separable_ms(stats)
        if unseparable is not None:
            return []  # the added time is retry backoff or queue wait, which R005 and R009 report
    retries = evidence.retries
    if retries is not None and retries.amplification >= MIN_AMPLIFICATION and \
            retries.extra_attempts >= MIN_EXTRA_ATTEMPTS:
        return []  # retried attempts load the backends beyond the direct path: not router time (R005 reports it)
    if att.routed_n < MIN_SAMPLES or att.direct_n < MIN_SAMPLES or att.direct_p50_ms is None:
        return []
    direct_p99 = att.direct_p99_ms or 0.0
    other_ms = sum(subtracted.values())
    median = _less(att.added_p50, other_ms)
    tail = att.added_p99
    allowance = host_allowance_ms(evidence)
    median_hit = (
        median.value is not None
        and median.excludes_zero_above
        and median.value >= max(MIN_ADDED_MS, MIN_ADDED_FRACTION * att.direct_p50_ms, allowance)
        and (median.low or 0.0) >= allowance
    )
    # The tail is noisy (a few samples decide it), so its whole interval must clear the threshold.
    tail_hit = (
        not subtracted  # retried and queued requests make the tail: it cannot be judged past them
        and att.routed_n >= TAIL_MIN_SAMPLES
        and tail.low is not None
        and tail.low >= max(TAIL_MIN_ADDED_MS, TAIL_MIN_FRACTION * direct_p99, host_tail_allowance_ms(evidence))
    )
    if not (median_hit or tail_hit):
        return _per_backend(evidence, other_ms)
    evidence_out: dict[str, object] = {
        "source": "probe",
        **estimate("added_p50_ms", median),
        **estimate("added_p99_ms", tail),
        "requests": att.routed_n,
        "router": evidence.router_url,
        "routed_p50_ms": att.routed_p50_ms,
        "direct_p50_ms": att.direct_p50_ms,
        "routed_p99_ms": att.routed_p99_ms,
        "direct_p99_ms": att.direct_p99_ms,
        "added_fraction_p50": att.added_fraction_p50,
        "p_value": att.p_value,
        "direct_n": att.direct_n,
        "per_backend_added_p50_ms": {b.backend: b.added_p50.value for b in att.per_backend},
        "host_allowance_ms": round(allowance, 3),
    }
    if subtracted:
        evidence_out.update(estimate("measured_added_p50_ms", att.added_p50))
        evidence_out["subtracted_ms"] = {k: round(v, 3) for k, v in subtracted.items()}
        evidence_out["router_stats"] = stats.window.source if stats is not None else None
    if median_hit:
        assert median.value is not None and median.low is not None and median.high is not None
        beyond = " beyond its " + " and ".join(
            f"{'retry back-off' if k == 'retry_backoff' else 'queue wait'} ({v:.1f} ms)"
            for k, v in subtracted.items()) if subtracted else ""
        title = (
            f"The router adds {median.value:.1f} ms at p50{beyond} (95% CI {median.low:.1f}-{median.high:.1f}): "
            f"routed {att.routed_p50_ms:.1f} ms vs direct {att.direct_p50_ms:.1f} ms"
        )
        severity = Severity.HIGH
    else:
        assert tail.value is not None and tail.low is not None and tail.high is not None
        title = (
            f"The router adds {tail.value:.1f} ms at p99 (95% CI {tail.low:.1f}-{tail.high:.1f}): "
            f"routed {att.routed_p99_ms or 0:.1f} ms vs direct {direct_p99:.1f} ms"
        )
        severity = Severity.MEDIUM
    return [
        RULE.finding(
            title, evidence_out, severity=severity, impact=max(0.0, min(1.0, att.added_fraction_p50 or 0.0))
        )
    ]


def _per_backend(evidence: RouteEvidence, other_ms: float = 0.0) -> list[Finding]:
    """R001 for one backend's routed path when the pooled comparison hides it (e.g. a slow router-to-node hop).

    ``other_ms``: retry back-off and queue wait already taken out of the pooled comparison, taken out here too.
    """
    findings: list[Finding] = []
    for entry in evidence.attribution.per_backend:
        backend = evidence.backend(entry.backend)
        added = _less(entry.added_p50, other_ms)
        direct_p50 = backend.direct.p50.value if backend is not None else None
        if entry.routed_n < MIN_SAMPLES or entry.direct_n < MIN_SAMPLES or direct_p50 is None:
            continue
        if added.value is None or added.low is None or added.high is None or not added.excludes_zero_above:
            continue
        allowance = host_allowance_ms(evidence)
        if added.value < max(MIN_ADDED_MS, MIN_ADDED_FRACTION * direct_p50, allowance) or added.low < allowance:
            continue
        findings.append(
            RULE.finding(
            f"Through the router, requests to {entry.backend} take {added.value:.1f} ms longer at p50 "
                f"(95% CI {added.low:.1f}-{added.high:.1f}) than sent to it directly",
                {
                    "source": "probe",
                    **estimate("added_p50_ms", added),
                    "added_p99_ms": None,  # the tail is judged pooled only
                    "requests": entry.routed_n,
                    "router": evidence.router_url,
                    "backend": entry.backend,
                    "direct_p50_ms": direct_p50,
                    "direct_n": entry.direct_n,
                },
                severity=Severity.MEDIUM,
            )
        )
    return findings


OVERHEAD_P99_MS = 100.0
"""Router time p99 at or above which it matters."""
OVERHEAD_SHARE = 0.2
"""... and at least this share of the request p99."""


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """Router time p99 against the request p99."""
    p99 = evidence.overhead_p99_ms
    request_p99 = evidence.request_p99_ms
    if p99 is None or request_p99 is None or evidence.overhead_samples < options.min_requests:
        return []
    share = p99 / request_p99 if request_p99 > 0 else 0.0
    if p99 < OVERHEAD_P99_MS or share < OVERHEAD_SHARE:
        return []
    return [RULE.finding(
            f"The router adds {p99:.0f} ms at p99 ({share:.0%} of the request p99)", {
        "source": "logs", "added_p50_ms": evidence.overhead_p50_ms, "added_p99_ms": p99,
        "requests": evidence.overhead_samples, "request_p99_ms": request_p99,
        "upstream_p99_ms": evidence.upstream_p99_ms, "share_of_request_p99": round(share, 3),
    }, impact=min(1.0, share))]
