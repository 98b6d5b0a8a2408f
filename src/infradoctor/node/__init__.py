"""``infradoctor node``: a health snapshot of this machine (GPUs, kernel log, host), then rules N001-N010, N012.

Probes gather evidence into frozen dataclasses (:mod:`.evidence`): the host through psutil (:mod:`.system`), GPUs
through NVML, ``nvidia-smi -q -x`` or nothing (:mod:`.gpu`), Xid events from the kernel log (:mod:`.kernel`), and
signs that a GPU should be visible (:mod:`.expect`). Rules (:mod:`.rules`, one module per code) are pure functions
of that evidence. :mod:`.watch` samples over time for ``--watch``.

``metrics`` of a node result:

- ``headline``: ``gpus``, ``gpu_util_max_pct``, ``gpu_memory_used_max_pct``, ``gpu_temp_max_c``,
  ``gpu_power_total_w``, ``gpus_throttled``, ``xid_events``, ``cpu_util_pct``, ``load_1m_per_core``,
  ``memory_used_pct``, ``swap_used_pct``, ``disk_used_max_pct``, ``tcp_time_wait``, ``fds_used_pct`` (absent
  when not available).
- ``host``: :class:`~.evidence.HostEvidence` (``cpu``, ``memory``, ``disks``, ``fds``, ``sockets``, ``top_cpu``,
  ``top_rss``), or null with ``--no-host``.
- ``gpu``: :class:`~.evidence.GpuSnapshot` (``backend``, ``source``, ``driver_version``, ``cuda_version``,
  ``available``, ``devices``: one :class:`~.evidence.GpuDevice` each, plus ``clock_event_reason_names``).
- ``kernel_log``: :class:`~.evidence.KernelLogEvidence` (``source``, ``lines_read``, ``xid_events``, ``tried``)
  plus ``xid_by_code``.
- ``gpu_expected``: :class:`~.evidence.GpuExpectation` plus ``reasons``.
- ``watch``: :class:`~.evidence.WatchSummary` (per metric ``min``/``mean``/``p95``/``max``) with ``--watch``, else
  null; then also ``distributions``: the sampled values per metric (``cpu_util_pct``, ``gpu0_util_pct`` ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
    from infradoctor.node.snapshot import NodeRequest, build_result, collect_evidence, evidence_from_metrics

__getattr__ = lazy_exports(__name__, {
    "NodeRequest": "snapshot",
    "build_result": "snapshot",
    "collect_evidence": "snapshot",
    "evidence_from_metrics": "snapshot",
})

__all__ = ["NodeRequest", "build_result", "collect_evidence", "evidence_from_metrics"]
