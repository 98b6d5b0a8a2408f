"""Routers' and model servers' own metrics: read, sampled over a run, summarised, judged.

- :mod:`~infradoctor.telemetry.prometheus`: the Prometheus text format, linear and bounded.
- :mod:`~infradoctor.telemetry.router`: Envoy admin, HAProxy stats/runtime API/exporter, nginx stub_status and
  Prometheus endpoints as one :class:`RouterSnapshot` (:func:`parse_router_stats` for live answers and saved
  dumps alike).
- :mod:`~infradoctor.telemetry.server`: vLLM, SGLang, TGI, Triton, TorchServe, Ray Serve and infradoctor's
  middleware as one :class:`ServerSnapshot` (:func:`parse_server_metrics`).
- :mod:`~infradoctor.telemetry.sampler`: the bounded sampling thread (``--router-stats``, ``--server-metrics``).
- :mod:`~infradoctor.telemetry.evidence`: counters as deltas and gauges as series over a window; the evidence
  the R and S rules read (:class:`RouterEvidence`, :class:`ServerEvidence`); :func:`dump_evidence` for one saved
  dump (``run_rules(dump_evidence(parse_router_stats(data, name)))``: what ``infradoctor logs`` can call).
- :mod:`~infradoctor.telemetry.sweep`: point by point over a load sweep (the seam ``infradoctor load`` uses).
- :mod:`~infradoctor.telemetry.rules`: S010 server-queueing, S011 kv-cache-pressure, S012 request-preemption,
  S013 no-batching (the router's own word feeds R003/R005/R009/R010/R011/R013 in ``route/rules``).

Layer: a domain package importing only core; ``load`` and ``route`` import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
    from infradoctor.telemetry.evidence import (
        RouterEvidence,
        RouterWindow,
        ServerEvidence,
        ServerPoint,
        ServerWindow,
        dump_evidence,
        router_window,
        server_window,
    )
    from infradoctor.telemetry.router import HostState, RouterSnapshot, parse_router_stats
    from infradoctor.telemetry.sampler import Sampler, Target, sampler_for
    from infradoctor.telemetry.server import ServerSnapshot, parse_server_metrics

__getattr__ = lazy_exports(__name__, {
    "RouterEvidence": "evidence", "RouterWindow": "evidence", "dump_evidence": "evidence", "ServerEvidence": "evidence",
    "ServerPoint": "evidence", "ServerWindow": "evidence", "router_window": "evidence", "server_window": "evidence",
    "HostState": "router", "RouterSnapshot": "router", "parse_router_stats": "router",
    "Sampler": "sampler", "Target": "sampler", "sampler_for": "sampler",
    "ServerSnapshot": "server", "parse_server_metrics": "server",
})

__all__ = [
    "HostState", "RouterEvidence", "RouterSnapshot", "RouterWindow", "Sampler", "ServerEvidence", "ServerPoint",
    "ServerSnapshot", "ServerWindow", "Target", "dump_evidence",
    "parse_router_stats", "parse_server_metrics", "router_window",
    "sampler_for", "server_window",
]
