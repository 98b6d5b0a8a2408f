"""``infradoctor logs``: failure signatures, incidents and router-vs-upstream time from router, app and kernel logs.

Layout: ``source`` reads files safely; ``formats/`` has one parser per format behind :class:`LogFormat` (access
logs compiled from nginx ``log_format`` / Envoy format strings, with a polars engine for large files); every parser
fills the bounded accumulator :class:`~infradoctor.logs.stats.LogStats`; ``evidence`` reduces it to
:class:`~infradoctor.logs.evidence.LogsEvidence`; ``rules/`` turn evidence into findings; ``run`` builds the result;
``present`` renders its sections.

``metrics`` of a logs result:

- ``headline``: ``lines``, ``requests``, ``error_rate`` (5xx share), ``request_p50_ms``, ``request_p99_ms``,
  ``upstream_p99_ms``, ``router_overhead_p99_ms``, ``incidents``, ``failing_lines``, ``skipped_lines``,
  ``parse_mb_per_s``.
- ``incidents``: ``[{kind, code, subject, start, end, duration_s, count, file, examples}]``, largest first; ``kind``
  is a signature id (``upstream_timeout``...), ``subject`` the upstream, GPU or source; examples are redacted and
  control characters escaped. ``incidents_dropped`` counts those beyond the limit.
- ``kinds``: ``{kind: {code, count, meaning, fix}}``.
- ``upstreams``: ``[{upstream, requests, errors, error_rate, p50_ms, p99_ms}]`` (per attempt; retries count).
- ``router_split``: request, upstream and router (request minus upstream) p50/p99 ms, and the request count.
- ``timeline``: ``{bucket_s, points: [{t, total, status: {2xx: n, ...}, kinds: {kind: n}}]}``.
- ``attempts``: ``{attempts per request: requests}``; ``queue``: HAProxy Tw per minute; ``xid``: per code and
  device with meaning, action and advice (the table in ``infradoctor.xid``, shared with ``node``);
  ``exceptions``: Python exception type -> tracebacks.
- ``files``: ``[{file, format, engine, lines, parsed, bytes, skipped: {reason: n}, seconds, error}]``;
  ``skipped`` and ``notes``: lines by reason over all files.
- ``parse``: ``bytes``, ``seconds``, ``cpu_seconds``, ``mb_per_s``, ``mb_per_cpu_s``, ``engines``, ``formats``.
- ``distributions``: ``upstream_latency_ms`` and ``request_latency_ms``, at most 5000 values each, evenly spaced
  ranks of the millisecond histograms (deterministic).
"""
