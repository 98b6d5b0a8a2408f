"""R011 cold-backend: a backend is much slower on its first requests than afterwards.

What it detects:
    A backend that takes traffic cold: from ``infradoctor route``, the first requests a backend served in the run
    (routed or direct, by send time) are several times slower than its steady state; from the router's statistics
    (``--router-stats``), backends that joined the router's rotation during the run.

Why it matters:
    A router that sends full traffic to a backend that has just started (model still loading, caches and CUDA
    kernels cold, JIT warming up) gives those users multi-second latencies or errors, at every deploy and every
    autoscaling event.

How it is measured:
    Median of the first ``COLD_FIRST_REQUESTS`` successful requests against the median of the rest (at least
    ``COLD_MIN_STEADY``; ``route/analysis.py``). Reported when the ratio is at least ``MIN_RATIO`` and the
    difference at least ``MIN_EXTRA_MS``.

    From the router's statistics (``--router-stats``): a host that joined the router's rotation during the run (added,
    or back from failing/down to healthy; Envoy ``membership_change``, HAProxy status changes) is reported at low
    severity with when it happened: its first requests take the cold path the rule above measures.

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor route``), ``router-stats`` or ``prometheus`` (``fleet``).
    - ``backends``: the backends named (their ``--backend`` URLs where the router's names map to them).

    From the probe also: ``backend``, ``first_n``, ``first_p50_ms``, ``steady_p50_ms``, ``first_max_ms``, ``ratio``.

    From the router's statistics also: ``changes`` (every host state change in the run, with when) and
    ``membership_changes``.

Fix:
    Warm the model up at start-up and gate readiness on it; use slow start in the router (Envoy
    ``slow_start_window``, HAProxy ``slowstart``, nginx Plus ``slow_start``).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions
from infradoctor.route.rules._router import stats_source
from infradoctor.telemetry.evidence import RouterEvidence

RULE = Rule(
    "R011",
    "cold-backend",
    Severity.MEDIUM,
    "A backend is slow on its first requests",
    fix="Use slow-start (Envoy slow_start_window, HAProxy slowstart) and readiness gated on model load.",
    risk="Slow-start delays full capacity of new backends.",
    commands=("route", "load"),
)

MIN_RATIO = 3.0
"""First-requests median over steady median from which a backend is cold."""

MIN_EXTRA_MS = 50.0
"""... and the smallest difference (ms) that matters."""


@RULE.check(RouteEvidence, RuleOptions)
def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R011 for each backend whose first requests were much slower."""
    findings: list[Finding] = []
    for backend in evidence.backends:
        cold = backend.cold
        if cold is None or cold.ratio < MIN_RATIO or cold.first_p50_ms - cold.steady_p50_ms < MIN_EXTRA_MS:
            continue
        findings.append(
            RULE.finding(
            f"Backend {backend.url} was {cold.ratio:.1f}x slower on its first {cold.first_n} requests "
                f"({cold.first_p50_ms:.0f} ms vs {cold.steady_p50_ms:.0f} ms)",
                {"source": "probe", "backends": [backend.url], "backend": backend.url, **cold.to_dict()},
            )
        )
    return findings


@RULE.check(RouterEvidence)
def check_router(evidence: RouterEvidence, options: object) -> list[Finding]:
    """R011 (low) for hosts that joined the router's rotation during the run."""
    joined = [c for c in evidence.window.host_changes if c.endswith(" s") and ("-> healthy" in c or "added" in c)]
    if not joined:
        return []
    names = sorted({c.split(":", 1)[0] for c in joined})
    mapped = [evidence.backend_names.get(n, n) for n in names]
    return [RULE.finding(
        f"{len(names)} backend{'s' if len(names) != 1 else ''} joined the router's rotation during the run "
        f"({'; '.join(joined[:4])}): new backends take traffic cold",
        {"source": stats_source(evidence), "backends": mapped, "changes": list(evidence.window.host_changes),
         "membership_changes": evidence.window.counters.get("membership_change")},
        severity=Severity.LOW,
    )]
