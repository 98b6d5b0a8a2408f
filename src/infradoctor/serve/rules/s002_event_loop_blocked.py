"""S002 event-loop-blocked: synchronous work blocks the server's event loop.

What it detects:
    The event loop of an async server (uvicorn, aiohttp) is held by synchronous user code: either it did not run
    its callbacks for stretches of at least the stall threshold (100 ms by default) adding up to at least
    ``MIN_BLOCKED_S``, or, for shorter and frequent blocks, user code was running on the loop at
    ``BUSY_SHARE`` of the busy probes (at least ``MIN_BUSY_SAMPLES`` of them) while the loop's lag reached
    ``LAG_P99_MS`` at p99. The finding points at the line in the ``async def`` endpoint that was running (the
    call into the model's forward pass, ``time.sleep``, file I/O), else at the innermost user frame.

Why it matters:
    While the loop is blocked, the server accepts no connections, reads no requests and sends no responses: every
    other request waits, so requests are served one at a time (S001) and tail latency grows with concurrency.

How it is measured:
    :class:`~infradoctor.serve.looplag.LoopLagMonitor` posts a callback into the loop every 50 ms from a watchdog
    thread and measures how late it runs. While a callback is late by more than the stall threshold, the watchdog
    samples the loop thread's stack (``sys._current_frames``) and keeps the innermost frame in user code; the
    site with the most blocked time becomes the finding's location. Blocks shorter than the threshold are caught
    by busy probes: a few milliseconds after posting each callback the watchdog looks whether it ran, and if not
    samples the stack once; the share of probes that found user code running estimates the share of time it held
    the loop. Severity is high when stalls take at least ``HIGH_BLOCKED_FRACTION`` of the observed time or the
    lag's p99 reaches ``HIGH_LAG_P99_MS``; else medium.

Fix:
    Run the blocking call in a thread pool (``await asyncio.to_thread(fn, ...)`` or ``loop.run_in_executor``), or
    declare the endpoint with plain ``def`` so the framework runs it in its thread pool.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from infradoctor.findings import Finding, Location, Rule, Severity
from infradoctor.serve.looplag import LoopLagEvidence, StackFrame

RULE = Rule(
    "S002",
    "event-loop-blocked",
    Severity.HIGH,
    "Event loop blocked by synchronous work",
    fix="Run the blocking call in a thread pool (await asyncio.to_thread(fn, ...)) or make the endpoint sync.",
    risk="Thread pool size limits concurrency; model code must be thread-safe.",
    commands=("profile",),
)

MIN_BLOCKED_S = 0.25
"""Total stalled time below which the finding is not raised (one short hiccup at start-up is not a defect)."""

HIGH_BLOCKED_FRACTION = 0.10
"""Share of observed time stalled from which the finding is high severity (else medium)."""

MAX_SITES = 5
"""Blocking sites listed in the evidence."""

BUSY_SHARE = 0.25
"""Share of busy probes finding user code on the loop (over all probes) from which short blocks are a finding."""

MIN_BUSY_SAMPLES = 20
"""Busy probes in user code needed before judging short blocks."""

LAG_P99_MS = 20.0
"""Loop lag p99 from which short blocks are felt by other requests."""

HIGH_LAG_P99_MS = 100.0
"""Loop lag p99 from which the finding is high severity."""


@dataclass(frozen=True)
class Options:
    """Thresholds of S002 (defaults are the documented constants)."""

    min_blocked_s: float = MIN_BLOCKED_S
    """See ``MIN_BLOCKED_S``."""
    high_blocked_fraction: float = HIGH_BLOCKED_FRACTION
    """See ``HIGH_BLOCKED_FRACTION``."""


@RULE.check(LoopLagEvidence, Options)
def check(evidence: LoopLagEvidence, options: Options | None = None) -> list[Finding]:
    """S002 when the loop was stalled long enough; located at the site that blocked it longest."""
    opts = options or Options()
    stalled = evidence.stall_count > 0 and evidence.blocked_s >= opts.min_blocked_s
    busy_user = [b for b in evidence.busy if b.site is not None]
    lag_p99 = evidence.lag_p99_ms or 0.0
    busy_share = evidence.busy_user_share
    busy = busy_share >= BUSY_SHARE and len(busy_user) >= MIN_BUSY_SAMPLES and lag_p99 >= LAG_P99_MS
    if not stalled and not busy:
        return []
    blocked_by_site: dict[StackFrame | None, float] = defaultdict(float)
    stalls_by_site: dict[StackFrame | None, int] = defaultdict(int)
    stack_by_site: dict[StackFrame | None, tuple[StackFrame, ...]] = {}
    for stall in evidence.stalls:
        blocked_by_site[stall.site] += stall.duration_s
        stalls_by_site[stall.site] += 1
        stack_by_site.setdefault(stall.site, stall.stack)
    probes_by_site: dict[StackFrame | None, int] = defaultdict(int)
    for sample in busy_user:
        probes_by_site[sample.site] += 1
    if stalled:
        ranked = sorted(blocked_by_site.items(), key=lambda item: (item[0] is None, -item[1]))
    else:
        ranked = sorted(((site, 0.0) for site in probes_by_site), key=lambda item: -probes_by_site[item[0]])
    top = ranked[0][0] if ranked else None
    fraction = evidence.blocked_fraction
    high = fraction >= opts.high_blocked_fraction or lag_p99 >= HIGH_LAG_P99_MS
    severity = Severity.HIGH if high else Severity.MEDIUM
    where = f" in {top.function}()" if top is not None else ""
    if stalled:
        title = (
            f"Event loop blocked {evidence.stall_count} times for {evidence.blocked_s:.2f} s in total "
            f"({fraction:.0%} of {evidence.observed_s:.1f} s){where}"
        )
    else:
        title = (f"User code holds the event loop {busy_share:.0%} of the time{where}: every other request waits "
                 f"(loop lag p99 {lag_p99:.0f} ms)")
    sites = [
        {
            "site": None if site is None else f"{site.file}:{site.line}",
            "function": None if site is None else site.function,
            "stalls": stalls_by_site.get(site, 0),
            "blocked_s": round(blocked_by_site.get(site, 0.0), 4),
            "busy_probes": probes_by_site.get(site, 0),
        }
        for site, _ in ranked[:MAX_SITES]
    ]
    evidence_out = {
        "stall_count": evidence.stall_count,
        "blocked_s": round(evidence.blocked_s, 4),
        "blocked_fraction": round(fraction, 4),
        "busy_user_share": round(busy_share, 4),
        "probes": evidence.probes,
        "observed_s": round(evidence.observed_s, 3),
        "stall_threshold_ms": round(evidence.stall_threshold_s * 1000.0, 1),
        "lag_p99_ms": evidence.lag_p99_ms,
        "lag_max_ms": evidence.lag_max_ms,
        "sites": sites,
        "stack": [str(f) for f in stack_by_site.get(top, ())[:10]],
    }
    location = Location(top.file, top.line, function=top.function) if top is not None else None
    return [RULE.finding(
            title, evidence_out, severity=severity, location=location, impact=max(fraction, busy_share))]
