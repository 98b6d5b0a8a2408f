"""The node rules N001-N010 and N012, one module each; :func:`evaluate` runs them all over one evidence.

N011 (gpu-oom) needs a workload's output and belongs to ``logs`` and ``profile``.
"""

from __future__ import annotations

from collections.abc import Callable

from infradoctor.findings import Finding
from infradoctor.node.evidence import NodeEvidence
from infradoctor.node.rules import (
    n001_gpu_xid,
    n002_gpu_ecc,
    n003_gpu_throttling,
    n004_gpu_memory_pressure,
    n005_gpu_contention,
    n006_host_memory_pressure,
    n007_cpu_saturated,
    n008_disk_full,
    n009_socket_exhaustion,
    n010_pcie_degraded,
    n012_gpu_not_visible,
)
from infradoctor.node.rules._common import NodeOptions

Rule = Callable[[NodeEvidence, NodeOptions], list[Finding]]

RULES: tuple[Rule, ...] = (
    n001_gpu_xid.check,
    n002_gpu_ecc.check,
    n003_gpu_throttling.check,
    n004_gpu_memory_pressure.check,
    n005_gpu_contention.check,
    n006_host_memory_pressure.check,
    n007_cpu_saturated.check,
    n008_disk_full.check,
    n009_socket_exhaustion.check,
    n010_pcie_degraded.check,
    n012_gpu_not_visible.check,
)
"""Every node rule, in code order."""

__all__ = ["RULES", "NodeOptions", "evaluate"]


def evaluate(evidence: NodeEvidence, options: NodeOptions | None = None) -> list[Finding]:
    """All findings of all node rules."""
    opts = options or NodeOptions()
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule(evidence, opts))
    return findings
