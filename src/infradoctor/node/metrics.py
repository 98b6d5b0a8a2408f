"""The node command's typed metrics (``Result.metrics`` of ``infradoctor node``): the evidence itself, plus a headline.

A stored run holds everything the rules read, so it can be evaluated again (:meth:`NodeMetrics.evidence`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from infradoctor.metrics import Metrics
from infradoctor.node.evidence import (
    GpuExpectation,
    GpuSnapshot,
    HostEvidence,
    KernelLogEvidence,
    NodeEvidence,
    WatchSummary,
)


@dataclass(frozen=True)
class NodeHeadline(Metrics):
    """The key numbers, flat, with units in the names; what is not available is left out of the JSON."""

    gpus: int
    """GPUs seen."""
    xid_events: int = 0
    """Xid lines in the kernel log (also those beyond the kept bound)."""
    gpus_throttled: int = 0
    """GPUs whose clocks are held down now (N003's judgement: faults, or the power cap while working)."""
    gpu_util_max_pct: float | None = None
    """Highest GPU utilisation."""
    gpu_memory_used_max_pct: float | None = None
    """Highest share of a GPU's memory in use (per MIG instance on GPUs in MIG mode)."""
    gpu_temp_max_c: float | None = None
    """Hottest GPU."""
    gpu_power_total_w: float | None = None
    """Power drawn by all GPUs together."""
    cpu_util_pct: float | None = None
    """Whole-machine CPU utilisation."""
    load_1m_per_core: float | None = None
    """1-minute load average per usable core."""
    memory_used_pct: float | None = None
    """Share of RAM not available to new work."""
    swap_used_pct: float | None = None
    """Share of swap in use."""
    disk_used_max_pct: float | None = None
    """Fullest filesystem in use."""
    tcp_time_wait: int | None = None
    """TCP sockets in TIME_WAIT."""
    fds_used_pct: float | None = None
    """This process's open file descriptors against its soft limit."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form without the values that are not available."""
        return {key: value for key, value in super().to_dict().items() if value is not None}


@dataclass(frozen=True)
class NodeMetrics(Metrics):
    """Metrics of ``infradoctor node``."""

    command: ClassVar[str] = "node"

    headline: NodeHeadline
    """The key numbers."""
    gpu: GpuSnapshot
    """What the GPU backend saw (NVML, an nvidia-smi report, or none)."""
    kernel_log: KernelLogEvidence
    """Xid events from the kernel log."""
    gpu_expected: GpuExpectation
    """Signs that this machine should have a visible GPU."""
    host: HostEvidence | None = None
    """The host probe (CPU, memory, disks, sockets, processes); null with ``--no-host``."""
    watch: WatchSummary | None = None
    """What ``--watch`` saw over time (per metric min/mean/p95/max); null without ``--watch``."""
    xid_by_code: dict[str, int] = field(default_factory=dict)
    """Xid events per code, among those kept."""
    distributions: dict[str, list[float]] = field(default_factory=dict)
    """With ``--watch``: the sampled values per metric (``cpu_util_pct``, ``gpu0_util_pct`` ...), evenly thinned."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (the headline without the values that are not available)."""
        return {**super().to_dict(), "headline": self.headline.to_dict()}

    def evidence(self) -> NodeEvidence:
        """The evidence the rules read, rebuilt from a stored run (notes live in the result's errors)."""
        return NodeEvidence(host=self.host, gpu=self.gpu, kernel=self.kernel_log, expectation=self.gpu_expected,
                            watch=self.watch)


def evidence_from_metrics(metrics: Mapping[str, Any]) -> NodeEvidence:
    """Rebuild the evidence of a stored node result's ``metrics``."""
    return NodeMetrics.from_dict(metrics).evidence()
