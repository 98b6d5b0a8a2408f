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
"""
