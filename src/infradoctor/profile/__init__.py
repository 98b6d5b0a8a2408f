"""``infradoctor profile``: run a Python workload under light instrumentation and name its bottleneck.

The command as a library: ``infradoctor.profile.run(ProfileRunOptions(argv, max_steps=200)) -> Result``
(``on_evidence`` receives what was measured, to save it). A server under load (``--load-url``) is a workflow above
this package: ``infradoctor.profile_load.run.run(options, ServiceLoadOptions(url))`` runs either. Underneath:
:func:`infradoctor.profile.launcher.start_profiled` (start, stop, collect evidence) and
:func:`infradoctor.profile.result.build_result` (evidence -> Result with metrics and findings).

``metrics`` layout of a profile result:

- ``workload``: ``exit_status`` (shell style: 128+N when killed by signal N), ``signal``, ``stop_reason``
  (exit/steps/duration/stopped/interrupted), ``duration_s``, ``instrumented``, ``torch_imported``,
  ``torch_version``, ``cuda``, ``profile_kind`` (``torch`` or ``cpu-only``), ``python_program``, ``exception`` (the
  exception that ended the program: ``type``, ``module``, ``message``, ``file``, ``line``, ``function`` of the
  innermost user frame; null without one).
- ``headline``: ``steps``, ``samples_per_s``, ``steps_per_s``, ``step_time_ms_p50``, ``step_time_ms_p90``,
  ``data_wait_fraction``, ``peak_rss_mb``, ``peak_tree_pss_mb`` (+ ``cuda_peak_mb``, ``gpu_util_mean_pct`` on GPU);
  flat numbers only: a value that is not available (no steps, no GPU samples) is left out.
- ``steps``: ``count``, ``kept`` (steps held for analysis: long runs are thinned evenly), ``warmup``, ``steady``,
  ``boundary`` (what marks a step: optimizer/dataloader/forward),
  ``time_s``, ``phase_ms_per_step`` and ``phase_fraction`` (data_wait, h2d, forward, backward, optimizer, sync,
  load, other; steady steps), ``step_time_ms`` (p50, p90, p99, mean, first, warmup_mean), ``forwards``,
  ``backwards``, ``optimizer_steps``.
- ``throughput``: ``samples_per_s``, ``steps_per_s``, ``batch_size`` (model's median), ``loader_batch_size``,
  ``samples``.
- ``memory``: ``peak_rss_mb``, ``peak_tree_pss_mb`` (the whole process tree, shared pages counted once),
  ``child_processes``, ``start_rss_mb``, ``peak_heap_mb``, ``cuda_peak_mb``, ``trend`` (source, readings,
  growth_kb_per_step, growth_mb, r2) and ``timeline`` (columns/rows: step, rss_mb, heap_mb, cuda_mb).
- ``model``: ``modules`` (top-level modules with parameters: class, params, calls, time, batch size, grad/train-mode
  calls, the main call site and ``call_sites``, one per calling line), ``other_modules`` (without parameters),
  ``data_modules`` (transforms called in dataset fetches), ``loads`` and ``constructions`` with call sites,
  ``alloc_sites`` (sampled once memory growth is suspected: site, sampled and still-alive allocations and bytes).
- ``syncs``: host reads by site (kind, site, calls, per_step, time_ms, loop_ms).
- ``dataloader``: ``loaders`` (configuration, call site, batches, wait), ``item_time_ms``, ``worker_processes``.
- ``h2d``, ``precision``: GPU copy counters and matmul precision settings.
- ``system``: ``cores``, ``cpu_percent_mean``, ``cpu_percent_per_core``, ``gpu_util_mean_pct`` and a ``timeline``
  (t_s, step, cpu_percent, process_cpu_percent, gpu_util) aligned to steps.
- ``distributions``: ``step_time_ms`` (steady steps, at most 5000 values).

The typed form is :class:`infradoctor.profile.metrics.ProfileMetrics` (every field documented there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports  # (standard library only: the profiled child imports this package)

if TYPE_CHECKING:
    from infradoctor.profile.metrics import ProfileMetrics
    from infradoctor.profile.result import ProfileRunOptions, run

__getattr__ = lazy_exports(__name__, {"ProfileMetrics": "metrics", "ProfileRunOptions": "result", "run": "result"})

__all__ = ["ProfileMetrics", "ProfileRunOptions", "run"]
