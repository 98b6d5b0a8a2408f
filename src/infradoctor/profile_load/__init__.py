"""``infradoctor profile --load-url``: a server run under the profiler, driven by the load engine, diagnosed whole.

Steps: start the server command under the profiler (with the event-loop watcher of
:mod:`infradoctor.serve.autoattach` injected into it and its worker processes), wait until it answers and its
worker processes have all started and stopped growing (bounded),
run a closed-loop load sweep against the load URL, read the worker layout while it is still up, stop it (SIGINT,
then SIGTERM, then SIGKILL, and any worker left behind), then merge both sides into one ``profile`` result:

- workload evidence from the profiler: model loads and constructions per request (P006 at the handler's line),
  grad in inference, host syncs, ... (rules P001-P015);
- service evidence from inside the server: event-loop stalls after start-up with the blocking line (S002), worker
  processes each holding a model copy (S004);
- load evidence from the client: serialized requests (S001), no backpressure (S003), cold start (S005), the knee
  (S008), errors (S006), ...

``metrics`` layout: the profile command's metrics (see :mod:`infradoctor.profile`) plus

- ``load``: the load command's metrics (``points``, ``knee``, ``curve``, ``headline``, ``settings``, ...; see
  :class:`infradoctor.load.metrics.LoadMetrics`);
- ``service``: ``load_url``, ``ready_url``, ``ready_s`` (seconds from start until the server answered and its
  worker processes held still), ``stop_exit_status``, ``cpu_at_peak_load`` (the server's and the machine's CPU
  during the last level), ``s001_not_judged`` (only when flat throughput was not called S001: why),
  ``loop`` (per server process: event-loop lag evidence after start-up, as
  :meth:`~infradoctor.serve.looplag.LoopLagEvidence.summary_dict`), ``workers`` (the worker layout, as
  :meth:`~infradoctor.serve.workers.WorkerLayout.to_dict`, or null);
- ``headline``: the load headline (``throughput_rps``, ``p50_ms``, ``p99_ms``, ``knee_concurrency``, ...) plus
  ``loop_blocked_s``, ``loop_lag_p99_ms``, ``workers`` and the profile headline's other keys;
- ``distributions``: the load's ``latency_ms`` and the profile's own distributions.

Typed as :class:`infradoctor.profile.metrics.ProfileMetrics` (``load`` and ``service`` set). The library entry is
:func:`infradoctor.profile_load.run.run` (``run(ProfileRunOptions(argv), ServiceLoadOptions(url))``): it tells
``ServiceLoadOptions.progress`` what it is doing (starting the server, waiting for it to answer, each load level,
stopping it), a line at a time.
"""

from __future__ import annotations

DEFAULT_READY_TIMEOUT_S = 120.0
"""How long the server may take to answer its first request (model loading included)."""

DEFAULT_LEVELS: tuple[int, ...] = (1, 2, 4, 8, 16)
"""Concurrency levels of the sweep unless given (``auto`` doubles until the knee instead)."""

DEFAULT_POINT_DURATION_S = 3.0
"""Seconds per load level."""
