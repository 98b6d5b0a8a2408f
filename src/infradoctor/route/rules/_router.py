"""What the router-statistics checks share: the window's numbers, host names mapped to backends."""

from __future__ import annotations

from infradoctor.telemetry.evidence import RouterEvidence
from infradoctor.telemetry.router import HostState

RETRY_SHARE = 0.05
"""Retries per client request from which the router's retries matter (R005) and explain added latency (R001)."""

QUEUE_SHARE = 0.05
"""Share of requests that waited in the router's pending queue from which queueing matters (R009, R001)."""


def stats_source(evidence: RouterEvidence) -> str:
    """The ``source`` evidence key of a finding from the router's statistics.

    ``prometheus`` where ``fleet`` read them from Prometheus, else ``router-stats`` (``--router-stats``, a dump).
    """
    return "prometheus" if evidence.window.format == "prometheus" else "router-stats"


def counter(evidence: RouterEvidence, key: str) -> float:
    """Growth of a canonical counter over the run (0 when the router does not report it)."""
    return evidence.window.counters.get(key, 0.0)


def gauge_max(evidence: RouterEvidence, key: str) -> float:
    """Largest reading of a canonical gauge (0 when absent)."""
    series = evidence.window.gauges.get(key)
    return series.max if series is not None else 0.0


def client_requests(evidence: RouterEvidence) -> float:
    """Requests the client sent through the router: as counted by the client, else the router's own count."""
    if evidence.client_requests:
        return float(evidence.client_requests)
    frontend = counter(evidence, "client_requests")
    if frontend:
        return frontend
    return max(0.0, counter(evidence, "requests") - counter(evidence, "retries"))


def host_label(evidence: RouterEvidence, host: HostState) -> str:
    """A host as the user knows it: the ``--backend`` URL it maps to, with the router's name for it."""
    url = evidence.backend_names.get(host.name) or (evidence.backend_names.get(host.address or ""))
    if url and host.name not in (host.address, url):
        return f"{url} ({evidence.window.kind} calls it {host.name})"
    return url or (host.name if not host.address or host.name == host.address else f"{host.name} ({host.address})")


def retry_share(evidence: RouterEvidence) -> float:
    """Router retries per client request."""
    clients = client_requests(evidence)
    return counter(evidence, "retries") / clients if clients else 0.0


def queued_share(evidence: RouterEvidence) -> float:
    """Share of requests that waited in (or were refused by) the router's pending queue."""
    clients = client_requests(evidence)
    if not clients:
        return 0.0
    waited = counter(evidence, "pending_overflow")
    if evidence.window.kind == "envoy":
        waited += counter(evidence, "pending_total") if gauge_max(evidence, "pending_active") > 0 else 0.0
    elif gauge_max(evidence, "pending_active") > 0 or gauge_max(evidence, "pending_max") > 0:
        waited = max(waited, clients if gauge_max(evidence, "queue_time_ms") > 0 else 0.0)
    return min(1.0, waited / clients)
