"""``infradoctor route``: is it the router or the node?

The same request is sent through the router and straight to each backend, interleaved in time
(:mod:`infradoctor.route.prober`), and the difference is attributed (:mod:`infradoctor.route.analysis`); side probes
measure TCP connect times, health endpoints, request counters and bandwidth (:mod:`infradoctor.route.network`);
rules (:mod:`infradoctor.route.rules`) turn the evidence into findings.

``metrics`` layout of a route result:

- ``paths``: one entry per path, the router first: ``name``, ``kind`` (``router``/``direct``), ``url``,
  ``requests``, ``ok``, ``errors`` (by class), ``error_rate``, ``p50_ms``/``p90_ms``/``p99_ms`` as
  ``{value, ci_low, ci_high}`` (successful requests, 95% order-statistic CI), ``mean_ms``, ``max_ms``.
- ``attribution``: ``routed_p50_ms``, ``direct_p50_ms``, ``routed_p99_ms``, ``direct_p99_ms``, ``added_p50_ms`` and
  ``added_p99_ms`` as ``{value, ci_low, ci_high}`` (routed minus direct, 95% bootstrap CI), ``added_fraction_p50``,
  ``p_value`` (one-sided Mann-Whitney), ``per_backend`` (added p50 per identified backend); routed requests the
  router retried are left out of the comparison.
- ``backends``: per ``--backend``: ``url``, ``address``, ``share``, ``expected_share``, ``served``,
  ``routed_errors``, ``failed_attempts`` (routed attempts on it the router retried elsewhere), ``routed_p50_ms``,
  ``direct`` (as in ``paths``), ``health``, ``counter_delta``, ``cold``.
- ``distribution``: ``header``, ``attributed``, ``unattributed``, ``counts``, ``expected_shares``,
  ``weights_source``, ``chi_square``, ``df``, ``p_value``, ``max_deviation``, ``unknown_addresses``.
- ``timeouts``: routed errors clustered at one duration (``timeout_ms``, ``attempts``, ``per_attempt_ms``,
  ``count``, ``statuses``, ``spread_ms``, ``backend_p99_ms``), or null.
- ``retries``: ``source``, ``client_requests``, ``backend_attempts``, ``extra_attempts``, ``amplification`` or null.
- ``network``: ``connect`` (per endpoint: ``attempts``, ``failures``, ``p50_ms``, ``p99_ms``, ``keep_alive``,
  ``requests_per_connection``, ``syn_retransmits``: connects that completed after a SYN retransmit at ~1 s / ~3 s,
  with their times in ``syn_retransmit_ms``) and ``bandwidth`` (iperf3 per host, or the reason it was not measured).
- ``plan``: concurrency, requests per connection per slot, duration, timeout, method, header, weights.
- ``headline``: ``router_added_p50_ms``, ``router_added_p99_ms``, ``routed_p50_ms``, ``direct_p50_ms``,
  ``routed_p99_ms``, ``direct_p99_ms``, ``routed_error_rate``, ``direct_error_rate``, ``requests``.
- ``distributions``: ``routed_latency_ms`` and ``direct_latency_ms`` (successful requests, at most 5000 each).
- ``router_stats``: the router's own statistics over the run (``--router-stats``; null without): ``source``,
  ``kind`` (``envoy``, ``haproxy``, ``nginx``, ...), ``format``, ``reads``, ``failed_reads``, ``counters`` (growth
  of canonical counters: ``retries``, ``pending_overflow``, ``panic``, ...), ``gauges`` (``{max, mean, last,
  series}`` per canonical gauge), ``limits``, ``hosts`` (the router's name, address, group, state, flags and
  per-host counters), ``host_changes``, ``worst_states``, ``problems``.
- ``servers``: per ``--server-metrics`` endpoint, the run as one point: the client's latency beside the server's
  waiting queue, running batch, KV-cache usage, preemptions, queue time and batch size.

The typed form is :class:`infradoctor.route.metrics.RouteMetrics`; :func:`run` is the library entry
(``infradoctor.route.run(RouteOptions(...)) -> Result``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
    from infradoctor.route.diagnose import RouteOptions, run
    from infradoctor.route.metrics import RouteMetrics

__getattr__ = lazy_exports(__name__, {"RouteOptions": "diagnose", "run": "diagnose", "RouteMetrics": "metrics"})

__all__ = ["RouteMetrics", "RouteOptions", "run"]
