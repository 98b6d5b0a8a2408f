"""R007 upstream-connect-error: TCP connects to a path fail intermittently, or take far longer than to the others.

What it detects:
    Connections to an upstream fail, or are lost before a response. From ``infradoctor route``: TCP connect probes
    to the router or a backend that fail some of the time (refused, timed out) without the endpoint being down, or
    whose connect time stands out from the other paths'. From logs (``infradoctor logs``): the router could not
    connect to an upstream or lost the connection before a response: Envoy ``UF``/``UC``/``UR`` and "upstream
    connect error or disconnect/reset before headers", nginx "connect() failed (111: Connection refused)" /
    "upstream prematurely closed connection" (and 502 in the access log), HAProxy ``SC``/``SH``/``SD``.

Why it matters:
    Connect failures and resets become 502s and retries at the router (multiplying load) although the router is
    healthy; slow connects add their time to every request that opens a connection, which is every request when
    keep-alive is off. Causes: a backend down or not listening where the router expects, crashing mid-request, or
    closing idle keep-alive connections the router still reuses; a full accept queue (``somaxconn``, backlog),
    conntrack or ephemeral-port exhaustion, packet loss (SYN retransmits at 1 s, 3 s), a firewall or an overloaded
    node.

How it is measured:
    Before the run, ``--connects`` TCP connects per endpoint, interleaved across endpoints. Reported when an
    endpoint has failures in at least ``MIN_FAILURE_RATE`` of its connects while some succeed (an endpoint where
    every connect fails is down: R003), or when its median connect time is at least ``SLOW_RATIO`` times the
    median of the other endpoints and at least ``SLOW_MIN_MS`` more. Failures are refusals and timeouts (the probe
    waits 4 s, past the SYN retransmits at 1 s and 3 s); a connect that completed after a retransmit is not one,
    it is counted in ``syn_retransmits`` with its time. The probes are spaced a little so that they do not
    themselves overflow a small accept queue.

    From logs (`infradoctor logs`): Signature catalog matches (``upstream_connect_error``, ``upstream_reset``,
    ``upstream_protocol_error`` for Envoy ``UPE``, ``dns_resolution_failed`` for ``DF``) merged into incidents per
    upstream and time window; the same failure in an access and an error log is one failure.

Evidence:
    Every check gives:

    - ``source``: ``probe`` (``infradoctor route``) or ``logs``.
    - ``failures``: failed connects (from the probe: to that endpoint; from logs: the failed requests of the
      incidents).

    From the probe also, per endpoint: ``path`` (``router`` or the backend URL), ``address``, ``attempts``,
    ``failure_classes`` (failed connects by class), ``failure_rate``, ``p50_ms``, ``p99_ms``, ``keep_alive``,
    ``requests_per_connection``, ``syn_retransmits``, ``syn_retransmit_ms``; ``others_p50_ms`` for a slow connect.

    From logs also: the incidents' summary: ``kinds`` (lines per signature), ``count`` (log lines), ``incidents``,
    ``files``, ``subjects``, ``first``, ``last``, ``windows``, ``example``.

Fix:
    Check that the backend is up and listening where the router expects; look for crashes or OOM kills at the
    incident times; check the endpoint's listen backlog and accept rate (``ss -lnt``: Recv-Q at Send-Q means a full
    queue), socket and port exhaustion on the node (``infradoctor node``) and packet loss on the path; make the
    backend's keep-alive timeout longer than the router's; use pooled keep-alive connections so that connects are
    rare; enable passive health checks so dead backends leave the pool.
"""

from __future__ import annotations

import statistics

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.incidents import LogsRuleOptions, signature_findings
from infradoctor.route.evidence import RouteEvidence
from infradoctor.route.rules._common import RuleOptions

RULE = Rule(
    "R007",
    "upstream-connect-error",
    Severity.HIGH,
    "The router cannot connect to or loses an upstream",
    fix="Check the backend is listening and not overloaded; align keep-alive timeouts (backend > router).",
    risk="None.",
    commands=("route", "logs"),
)

MIN_FAILURE_RATE = 0.02
"""Failed share of connects that matters."""

SLOW_RATIO = 5.0
"""An endpoint's median connect time must be this many times the others' median ..."""

SLOW_MIN_MS = 2.0
"""... and at least this much more (ms)."""


@RULE.check(RouteEvidence, RuleOptions)
def check(evidence: RouteEvidence, options: RuleOptions) -> list[Finding]:
    """R007 for each endpoint with intermittent connect failures or a standout connect time."""
    findings: list[Finding] = []
    for probe in evidence.connect:
        connected = probe.attempts - sum(probe.failures.values())
        probed = probe.to_dict()
        base = {"source": "probe", "failures": sum(probe.failures.values()), "path": probe.name,
                **{k: v for k, v in probed.items() if k not in ("name", "failures")},
                "failure_classes": probed["failures"]}
        if connected > 0 and probe.failure_rate >= MIN_FAILURE_RATE:
            findings.append(
                RULE.finding(
            f"{probe.failure_rate:.0%} of TCP connects to {probe.name} ({probe.address}) failed",
                    base,
                    severity=Severity.HIGH,
                    impact=probe.failure_rate,
                )
            )
            continue
        others = [p.p50_ms for p in evidence.connect if p is not probe and p.p50_ms is not None]
        if probe.p50_ms is None or not others:
            continue
        typical = statistics.median(others)
        if probe.p50_ms >= SLOW_RATIO * typical and probe.p50_ms - typical >= SLOW_MIN_MS:
            findings.append(
                RULE.finding(
            f"TCP connects to {probe.name} ({probe.address}) take {probe.p50_ms:.1f} ms at p50, "
                    f"{probe.p50_ms / typical if typical > 0 else float('inf'):.0f}x the other paths "
                    f"({typical:.2f} ms)",
                    {**base, "others_p50_ms": typical},
                    severity=Severity.MEDIUM,
                )
            )
    return findings


@RULE.check(LogsEvidence, LogsRuleOptions)
def check_logs(evidence: LogsEvidence, options: LogsRuleOptions) -> list[Finding]:
    """One finding with every connect-failure and reset incident."""
    return signature_findings(evidence, RULE, LOGS_SIGNATURES, "Upstream connect failures and resets")


LOGS_SIGNATURES = ("upstream_connect_error", "upstream_reset", "upstream_protocol_error", "dns_resolution_failed")
"""The log signatures of this code: connect failures, resets, upstream protocol errors (Envoy ``UPE``), DNS
failures (``DF``)."""
