"""R009 router-queueing: requests wait inside the router for a backend connection or slot.

What it detects:
    Requests waiting inside the router: HAProxy queue time (``Tw``) large and growing minute over minute, or large
    for a burst of minutes (a load spike the backends could not absorb, even if it ends before the log does), and
    requests rejected by a full queue or circuit breaker (Envoy ``UO``, HAProxy ``sQ``).

    From the router's statistics (``--router-stats``): Envoy's pending queue (``upstream_rq_pending_active`` gauge,
    ``upstream_rq_pending_total``/``_overflow`` counters, ``circuit_breakers.default.rq_pending_open``), HAProxy's
    queues (``qcur``/``qmax`` per backend and server, ``qtime``).

Why it matters:
    Queueing in the router adds latency before a backend even sees the request; when it grows over time, the
    backends cannot keep up with the offered load and the queue will end in timeouts.

How it is measured:
    From ``--router-stats``: the pending gauge's largest reading and the queue counters' growth over the run;
    reported when requests waited (a pending gauge above zero with ``QUEUE_SHARE`` of the requests entering the
    queue, HAProxy ``qmax`` above zero, or any overflow), with the configured limits in the evidence.

    From logs: Mean ``Tw`` per minute; the finding fires when the worst minute's mean reaches :data:`QUEUE_MS` (50 ms)
    and the last third of the minutes averages at least :data:`GROWTH` (2) times the first third; or when a burst of at
    least :data:`BURST_MINUTES` (2) consecutive minutes each averages :data:`QUEUE_MS` or more and :data:`GROWTH` times
    the median of the other minutes; or when the overflow signature occurs.

Evidence:
    Every check gives:

    - ``source``: ``logs``, ``router-stats`` or ``prometheus`` (``fleet``).
    - ``queue_time_ms_max``: the largest mean queue time seen (ms): from logs the worst minute's mean ``Tw``,
      from the router's statistics HAProxy's largest ``qtime``; None where the router does not report it (Envoy)
      or the logs hold no queue times.
    - ``rejected``: requests refused by a full queue or circuit breaker (from logs: the overflow incidents'
      failed requests; from the router: ``pending_overflow``).

    From logs also, for queue time growing or in a burst: ``worst_minute``, ``worst_max_queue_ms``,
    ``first_third_mean_ms``, ``last_third_mean_ms``, ``minutes``, ``growing``, ``requests``, ``burst``; for
    overflow: the incidents' summary (``count``, ``failures``, ``incidents``, ``files``, ``subjects``, ``first``,
    ``last``, ``windows``, ``example``).

    From the router's statistics also: ``router_stats``, ``router`` (its kind), ``pending_max``, ``queued_share``,
    ``pending_total``, ``breaker_pending_open``, ``client_requests``, ``limits``.

Fix:
    Add backend capacity or replicas, or raise per-server maxconn / circuit-breaker limits in step with what each
    backend can serve; shed load early (429 with Retry-After) instead of queueing without bound.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence, iso
from infradoctor.logs.incidents import LogsRuleOptions, incident_summary
from infradoctor.route.rules._router import QUEUE_SHARE, client_requests, counter, gauge_max, queued_share, stats_source
from infradoctor.telemetry.evidence import RouterEvidence

RULE = Rule(
    "R009",
    "router-queueing",
    Severity.MEDIUM,
    "Requests queue inside the router",
    fix="Raise backend maxconn/capacity or add backends; shed load early.",
    risk="More in-flight requests per backend raise its latency.",
    commands=("route", "load", "logs"),
)
QUEUE_MS = 50.0
"""Mean queue time in the worst minute at or above which queueing matters."""
GROWTH = 2.0
"""Last third over first third of the minutes' mean queue time that counts as growing."""
BURST_MINUTES = 2
"""Consecutive minutes of queueing that make a burst."""


@RULE.check(LogsEvidence, LogsRuleOptions)
def check(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """Queue growth from HAProxy Tw and overflow incidents."""
    findings = []
    minutes = evidence.queue_by_minute
    overflow = evidence.incidents_of("upstream_overflow")
    rejected = sum(i.failures for i in overflow)
    worst_mean = round(max(m[2] for m in minutes), 1) if minutes else None
    if minutes and sum(m[1] for m in minutes) >= options.min_requests:
        worst = max(minutes, key=lambda m: m[2])
        third = max(1, len(minutes) // 3)
        first = _mean(minutes[:third])
        last = _mean(minutes[-third:])
        growing = len(minutes) >= 3 and last >= GROWTH * max(first, 1.0)
        burst = _burst(minutes)
        if worst[2] >= QUEUE_MS and (growing or burst is not None or len(minutes) < 3):
            title = f"Router queue time reached {worst[2]:.0f} ms mean in a minute"
            if growing:
                title += f", growing from {first:.0f} to {last:.0f} ms"
            elif burst is not None:
                title += (f" in a burst of {burst[1] - burst[0] + 1} minutes from {iso(burst[0] * 60)} (mean "
                          f"{burst[2]:.0f} ms vs {burst[3]:.0f} ms in the other minutes)")
            findings.append(RULE.finding(title, {
                "source": "logs", "queue_time_ms_max": worst_mean, "rejected": rejected,
                "worst_minute": iso(worst[0] * 60),
                "worst_max_queue_ms": worst[3], "first_third_mean_ms": round(first, 1),
                "last_third_mean_ms": round(last, 1), "minutes": len(minutes), "growing": growing,
                "requests": sum(m[1] for m in minutes),
                "burst": None if burst is None else {"start": iso(burst[0] * 60), "end": iso(burst[1] * 60 + 59),
                                                     "mean_queue_ms": round(burst[2], 1),
                                                     "others_median_ms": round(burst[3], 1)},
            }))
    if overflow:
        summary = incident_summary(overflow)
        findings.append(RULE.finding(
            f"{summary['failures']} requests rejected by a full queue or circuit breaker",
            {"source": "logs", "queue_time_ms_max": worst_mean, "rejected": rejected, **summary}))
    return findings


def _burst(minutes: tuple[tuple[int, int, float, int], ...]) -> tuple[int, int, float, float] | None:
    """(first minute, last minute, mean queue ms, others' median ms) of the longest queueing burst, or None.

    A burst is a run of consecutive minutes, each with a mean Tw of at least QUEUE_MS, at least BURST_MINUTES long,
    whose mean is at least GROWTH times the median of the other minutes' means.
    """
    best: tuple[int, int] | None = None
    run_start: int | None = None
    for index, (minute, _n, mean, _max) in enumerate(minutes):
        contiguous = index > 0 and minute == minutes[index - 1][0] + 1
        if mean >= QUEUE_MS:
            if run_start is None or not contiguous:
                run_start = index
            if best is None or index - run_start > best[1] - best[0]:
                best = (run_start, index)
        else:
            run_start = None
    if best is None or best[1] - best[0] + 1 < BURST_MINUTES:
        return None
    inside = minutes[best[0]:best[1] + 1]
    outside = sorted(m[2] for m in minutes[:best[0]] + minutes[best[1] + 1:])
    others = outside[len(outside) // 2] if outside else 0.0
    mean = _mean(inside)
    if outside and mean < GROWTH * max(others, 1.0):
        return None
    return inside[0][0], inside[-1][0], mean, others


def _mean(minutes: tuple[tuple[int, int, float, int], ...]) -> float:
    requests = sum(m[1] for m in minutes)
    return sum(m[1] * m[2] for m in minutes) / requests if requests else 0.0


@RULE.check(RouterEvidence)
def check_router(evidence: RouterEvidence, options: object) -> list[Finding]:
    """R009 from the router's pending-queue gauges and counters."""
    overflow = counter(evidence, "pending_overflow")
    peak = max(gauge_max(evidence, "pending_active"), gauge_max(evidence, "pending_max"))
    share = queued_share(evidence)
    breaker = gauge_max(evidence, "breaker_pending_open")
    limits = evidence.window.limits
    limit = limits.get("max_pending_requests", limits.get("queue_limit"))
    # the gauge is sampled and can miss a queue that fills and drains between readings; the overflow counter
    # cannot: a request refused by a full queue means the queue held its limit at that moment (Envoy's
    # pending_total is no such proof: it counts every request that waited for a new connection, however briefly)
    if overflow:
        peak = max(peak, float(limit) if limit is not None and limit > 0 else 1.0)
    if not overflow and (peak <= 0 or share < QUEUE_SHARE):
        return []
    wait = gauge_max(evidence, "queue_time_ms")
    parts = [f"up to {peak:.0f} waiting"]
    if wait:
        parts.append(f"mean queue time up to {wait:.0f} ms")
    if overflow:
        parts.append(f"{overflow:.0f} refused by a full queue")
    if breaker:
        parts.append("the circuit breaker's pending limit was open")
    title = f"Requests queue inside the router ({evidence.window.kind}): " + ", ".join(parts) + (
        f" (limit {limit:g})" if limit is not None else "")
    return [RULE.finding(
        title,
        {"source": stats_source(evidence), "queue_time_ms_max": wait or None, "rejected": overflow,
         "router_stats": evidence.window.source, "router": evidence.window.kind, "pending_max": peak,
         "queued_share": round(share, 4), "pending_total": counter(evidence, "pending_total"),
         "breaker_pending_open": bool(breaker),
         "client_requests": client_requests(evidence), "limits": dict(limits)},
        # HAProxy reports a mean queue time, not how many waited: only overflow makes its queueing high
        severity=Severity.HIGH if overflow or (evidence.window.kind == "envoy" and share >= 0.5) else Severity.MEDIUM,
        impact=min(1.0, share),
    )]
