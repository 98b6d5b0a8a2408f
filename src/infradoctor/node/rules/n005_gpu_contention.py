"""N005 gpu-contention: several processes share one GPU.

What it detects:
    A GPU (without MIG) on which more than :data:`MAX_PROCESSES` distinct compute processes hold memory.

Why it matters:
    Processes on one GPU time-slice its engines: each runs slower than alone, latency becomes erratic, and their
    memory adds up toward out-of-memory. Often one of them is a leftover (a notebook kernel, a crashed job's
    worker, a second server replica pinned to the same device).

How it is measured:
    NVML ``nvmlDeviceGetComputeRunningProcesses`` (or nvidia-smi's ``<processes>``), counting distinct pids with
    their GPU memory. GPUs in MIG mode are skipped: there processes are isolated in their own instances by design.

Fix:
    Give each job its own GPU (``CUDA_VISIBLE_DEVICES``), stop stray processes, or share deliberately with MIG or
    MPS.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.node.evidence import NodeEvidence
from infradoctor.node.rules._common import NodeOptions, gib, gpu_location

RULE = Rule(
    "N005",
    "gpu-contention",
    Severity.MEDIUM,
    "Several processes share a GPU",
    fix="Give each job its own GPU (CUDA_VISIBLE_DEVICES) or use MIG/MPS deliberately.",
    risk="Fewer jobs per node.",
    commands=("node",),
)

MAX_PROCESSES = 1
"""Distinct compute processes per GPU above which the GPU counts as shared."""


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per shared GPU."""
    limit = options.threshold(RULE.code, "MAX_PROCESSES", MAX_PROCESSES)
    findings = []
    for device in evidence.gpu.devices:
        if device.mig_enabled:
            continue
        compute = {p.pid: p for p in device.processes if p.kind == "compute"}
        if len(compute) <= limit:
            continue
        procs = sorted(compute.values(), key=lambda p: -(p.used_memory_bytes or 0))
        findings.append(
            RULE.finding(
            f"{device.label} is shared by {len(compute)} processes: "
                + ", ".join(f"{p.name or '?'}[{p.pid}]" for p in procs[:4]),
                {
                    "gpu": device.index,
                    "processes": [
                        {"pid": p.pid, "name": p.name, "used_gib": gib(p.used_memory_bytes)} for p in procs[:20]
                    ],
                    "utilization_gpu_pct": device.utilization_gpu_pct,
                },
                location=gpu_location(device),
            )
        )
    return findings
