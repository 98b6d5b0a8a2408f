"""R007 upstream-connect-error, from router logs.

What it detects:
    The router could not connect to an upstream, or lost the connection before a response: Envoy ``UF``/``UC``/
    ``UR`` and "upstream connect error or disconnect/reset before headers", nginx "connect() failed (111: Connection
    refused)" / "upstream prematurely closed connection" (and 502 in the access log), HAProxy ``SC``/``SH``/``SD``.

Why it matters:
    These requests fail (or are retried, multiplying load) although the router is healthy: a backend is down, not
    listening on the address the router uses, crashing mid-request, or closing idle keep-alive connections the
    router still reuses.

How it is measured:
    Signature catalog matches (``upstream_connect_error`` and ``upstream_reset``) merged into incidents per upstream
    and time window.

Fix:
    Check that the backend is up and listening where the router expects; look for crashes or OOM kills at the
    incident times; make the backend's keep-alive timeout longer than the router's; enable passive health checks
    so dead backends leave the pool.
"""

from __future__ import annotations

from infradoctor.findings import Finding
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.rules import RuleOptions
from infradoctor.logs.rules._signature import signature_findings

CODE = "R007"


def check(evidence: LogsEvidence, options: RuleOptions) -> list[Finding]:
    """One finding with every connect-failure and reset incident."""
    return signature_findings(evidence, CODE, ("upstream_connect_error", "upstream_reset"),
                              "Upstream connect failures and resets")
