"""``infradoctor fleet``: the incident window across every node, from Prometheus.

Prometheus (or Thanos, Mimir, VictoriaMetrics behind the same API) already holds the fleet's evidence:
dcgm-exporter on every GPU node, node_exporter, router and model-server metrics, kube-state-metrics. The command
asks it for the window's summaries, aggregated server-side (:mod:`~infradoctor.fleet.queries`), builds each
node's evidence as ``infradoctor node`` does and runs the same rules over it (:mod:`~infradoctor.fleet.node_view`),
compares every GPU with its peers (N013 gpu-straggler), follows each finding's signal over time to find the
incident's onset and the change before it (N015 fleet-onset), and can write Prometheus alerting rules with
thresholds from a healthy window (:mod:`~infradoctor.fleet.alerts`).

Result ``metrics``: :class:`~infradoctor.fleet.metrics.FleetMetrics` (``headline``, ``window``, ``prometheus``,
``coverage`` per exporter, ``nodes`` = the fleet table, ``routers``, ``servers``, ``containers``, ``onsets``,
``timeline``, ``changes``, ``alert_rules``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
    from infradoctor.fleet.metrics import FleetMetrics
    from infradoctor.fleet.run import FleetOptions, run

__getattr__ = lazy_exports(__name__, {"FleetOptions": "run", "run": "run", "FleetMetrics": "metrics"})

__all__ = ["FleetMetrics", "FleetOptions", "run"]
