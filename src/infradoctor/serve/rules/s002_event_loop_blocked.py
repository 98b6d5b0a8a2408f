"""S002 event-loop-blocked: synchronous work blocks the server's event loop.

What it detects:
    The event loop of an async server (uvicorn, aiohttp) did not run its callbacks for stretches of at least the
    stall threshold (100 ms by default), adding up to at least ``MIN_BLOCKED_S``. The finding points at the
    user-code line that was executing during the stalls (for example a model forward pass or ``time.sleep`` inside
    an ``async def`` endpoint).

Why it matters:
    While the loop is blocked, the server accepts no connections, reads no requests and sends no responses: every
    other request waits, so requests are served one at a time (S001) and tail latency grows with concurrency.

How it is measured:
    :class:`~infradoctor.serve.looplag.LoopLagMonitor` posts a callback into the loop every 50 ms from a watchdog
    thread and measures how late it runs. While a callback is late by more than the stall threshold, the watchdog
    samples the loop thread's stack (``sys._current_frames``) and keeps the innermost frame in user code; the
    site with the most blocked time becomes the finding's location. Severity is high when stalls take at least
    ``HIGH_BLOCKED_FRACTION`` of the observed time.

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
    if evidence.stall_count == 0 or evidence.blocked_s < opts.min_blocked_s:
        return []
    blocked_by_site: dict[StackFrame | None, float] = defaultdict(float)
    stalls_by_site: dict[StackFrame | None, int] = defaultdict(int)
    stack_by_site: dict[StackFrame | None, tuple[StackFrame, ...]] = {}
    for stall in evidence.stalls:
        blocked_by_site[stall.site] += stall.duration_s
        stalls_by_site[stall.site] += 1
        stack_by_site.setdefault(stall.site, stall.stack)
    ranked = sorted(blocked_by_site.items(), key=lambda item: (item[0] is None, -item[1]))
    top = ranked[0][0] if ranked else None
    fraction = evidence.blocked_fraction
    severity = Severity.HIGH if fraction >= opts.high_blocked_fraction else Severity.MEDIUM
    where = f" in {top.function}()" if top is not None else ""
    title = (
        f"Event loop blocked {evidence.stall_count} times for {evidence.blocked_s:.2f} s in total "
        f"({fraction:.0%} of {evidence.observed_s:.1f} s){where}"
    )
    sites = [
        {
            "site": None if site is None else f"{site.file}:{site.line}",
            "function": None if site is None else site.function,
            "stalls": stalls_by_site[site],
            "blocked_s": round(blocked, 4),
        }
        for site, blocked in ranked[:MAX_SITES]
    ]
    evidence_out = {
        "stall_count": evidence.stall_count,
        "blocked_s": round(evidence.blocked_s, 4),
        "blocked_fraction": round(fraction, 4),
        "observed_s": round(evidence.observed_s, 3),
        "stall_threshold_ms": round(evidence.stall_threshold_s * 1000.0, 1),
        "lag_p99_ms": evidence.lag_p99_ms,
        "lag_max_ms": evidence.lag_max_ms,
        "sites": sites,
        "stack": [str(f) for f in stack_by_site.get(top, ())[:10]],
    }
    location = Location(top.file, top.line, function=top.function) if top is not None else None
    return [RULE.finding(
            title, evidence_out, severity=severity, location=location, impact=fraction)]
