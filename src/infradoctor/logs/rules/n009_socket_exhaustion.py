"""N009 socket-exhaustion, from router and application logs.

What it detects:
    "Cannot assign requested address" (EADDRNOTAVAIL: no free ephemeral port) and "Too many open files" (EMFILE).

Why it matters:
    New connections fail although the peer is healthy. Typically a client or router opens a new connection per
    request, leaving tens of thousands of sockets in TIME_WAIT.

How it is measured:
    Signature catalog matches merged into incidents per subject and time window.

Fix:
    Reuse connections (keep-alive pools to upstreams), widen net.ipv4.ip_local_port_range, raise the fd limit.
"""

from __future__ import annotations

from infradoctor.findings import Finding
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.rules import RuleOptions
from infradoctor.logs.rules._signature import signature_findings

CODE = "N009"


def check(evidence: LogsEvidence, options: RuleOptions) -> list[Finding]:
    """One finding with every socket-exhaustion incident."""
    return signature_findings(evidence, CODE, ("socket_exhaustion",), "Socket or port exhaustion")
