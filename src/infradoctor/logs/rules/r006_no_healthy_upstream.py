"""R006 no-healthy-upstream, from router logs.

What it detects:
    Requests the router answered itself because no backend was available: Envoy ``UH``/``NR`` flags and
    "no healthy upstream", nginx "no live upstreams" (and 502/503 whose ``$upstream_addr`` is the upstream group's
    name), HAProxy ``<NOSRV>`` with 503.

Why it matters:
    Every such request fails without reaching a model. It usually means all backends failed health checks at once:
    crashing, restarting, or still loading the model while the router already sends traffic.

How it is measured:
    Lines are classified by the signature catalog (``infradoctor.logs.signatures``) and merged into incidents per
    subject and time window; the finding lists the windows.

Fix:
    Find why backends fail health checks at those times; gate readiness on the model being loaded; check Envoy's
    panic threshold and outlier ejection (max_ejection_percent) so a small pool is not ejected entirely.
"""

from __future__ import annotations

from infradoctor.findings import Finding
from infradoctor.logs.evidence import LogsEvidence
from infradoctor.logs.rules import RuleOptions
from infradoctor.logs.rules._signature import signature_findings

CODE = "R006"


def check(evidence: LogsEvidence, options: RuleOptions) -> list[Finding]:
    """One finding with every no-healthy-upstream incident."""
    return signature_findings(evidence, CODE, ("no_healthy_upstream",), "No healthy upstream")
