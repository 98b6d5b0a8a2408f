"""``infradoctor node``: a health snapshot of this machine (GPUs, kernel log, host), then rules N001-N010, N012.

Library entry: :func:`run` (``infradoctor.node.run(NodeRequest(...)) -> Result``), which neither prints nor exits.

Probes gather evidence into frozen dataclasses (:mod:`.evidence`): the host through psutil (:mod:`.system`), GPUs
through NVML, nvidia-smi's ``-q -x`` or ``-q`` reports, or nothing (:mod:`.gpu`), Xid events from the kernel log
(:mod:`.kernel`), and signs that a GPU should be visible (:mod:`.expect`). Rules (:mod:`.rules`, one module per
code) are pure functions of that evidence, whoever gathered it: ``infradoctor fleet`` builds the same
:class:`~.evidence.GpuDevice` objects from Prometheus. :mod:`.watch` samples over time for ``--watch``.

``metrics`` of a node result is :class:`~.metrics.NodeMetrics`: ``headline`` (``gpus``, ``gpu_util_max_pct``,
``gpu_memory_used_max_pct``, ``gpu_temp_max_c``, ``gpu_power_total_w``, ``gpus_throttled``, ``xid_events``,
``cpu_util_pct``, ``load_1m_per_core``, ``memory_used_pct``, ``swap_used_pct``, ``disk_used_max_pct``,
``tcp_time_wait``, ``fds_used_pct``; absent when not available), ``gpu`` (:class:`~.evidence.GpuSnapshot`: one
:class:`~.evidence.GpuDevice` per GPU with its processes, MIG devices and, after a watch, its window),
``kernel_log``, ``xid_by_code``, ``gpu_expected``, ``host`` (null with ``--no-host``), ``watch`` (per metric
min/mean/p95/max, null without ``--watch``) and ``distributions`` (the sampled values per metric).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infradoctor._lazy import lazy_exports

if TYPE_CHECKING:
    from infradoctor.node.diagnose import run
    from infradoctor.node.metrics import NodeMetrics, evidence_from_metrics
    from infradoctor.node.snapshot import NodeRequest, build_result, collect_evidence

__getattr__ = lazy_exports(__name__, {
    "run": "diagnose",
    "NodeRequest": "snapshot",
    "NodeMetrics": "metrics",
    "build_result": "snapshot",
    "collect_evidence": "snapshot",
    "evidence_from_metrics": "metrics",
})

__all__ = ["NodeMetrics", "NodeRequest", "build_result", "collect_evidence", "evidence_from_metrics", "run"]
