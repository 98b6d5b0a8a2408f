"""N005 gpu-contention: several compute processes hold memory on one GPU (or one MIG instance) and compete.

What it detects:
    More than :data:`MAX_PROCESSES` distinct compute processes holding GPU memory on one GPU, or inside one MIG
    instance of a GPU in MIG mode (instances are isolated from each other, processes within one are not). Only
    processes that hold a known amount of memory count: graphics-only contexts (``G``) and desktop applications
    under Windows WDDM or in a vGPU guest, whose memory the driver does not report (``C+G`` with "N/A"), are a
    desktop's windows, not work competing for the GPU.

Why it matters:
    Processes on one GPU time-slice its engines: each runs slower than alone, latency becomes erratic, and their
    memory adds up toward out-of-memory. Often one of them is a leftover (a notebook kernel, a crashed job's
    worker, a second server replica pinned to the same device).

How it is measured:
    NVML ``nvmlDeviceGetComputeRunningProcesses`` (or nvidia-smi's ``<processes>``), counting distinct pids with a
    memory figure, per GPU or per MIG GPU instance. Severity: ``medium`` when the GPU is busy (utilisation at
    least :data:`BUSY_UTIL_PCT` percent): they contend; ``low`` when utilisation is not known (MIG reports none);
    ``info`` on a GPU that is mostly idle: the processes share it without contending yet.

Fix:
    Give each job its own GPU (``CUDA_VISIBLE_DEVICES``), stop stray processes, or share deliberately with MIG or
    MPS.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from infradoctor.findings import Finding, Location, Rule, Severity
from infradoctor.node.evidence import GpuDevice, GpuProcess, NodeEvidence
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
"""Distinct compute processes holding memory per GPU (or MIG instance) above which it counts as shared."""
BUSY_UTIL_PCT = 30.0
"""GPU utilisation at or above which processes sharing the GPU contend for it (below: they share an idle GPU)."""


def competing(processes: Iterable[GpuProcess]) -> list[GpuProcess]:
    """Compute processes that hold a known amount of memory, one per pid, largest first."""
    by_pid: dict[int, GpuProcess] = {}
    for proc in processes:
        if proc.kind != "graphics" and proc.used_memory_bytes is not None:
            by_pid.setdefault(proc.pid, proc)
    return sorted(by_pid.values(), key=lambda p: -(p.used_memory_bytes or 0))


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per shared GPU or MIG instance."""
    limit = options.threshold(RULE.code, "MAX_PROCESSES", MAX_PROCESSES)
    findings = []
    for device in evidence.gpu.devices:
        if device.mig_enabled:
            groups: dict[int | None, list[GpuProcess]] = {}
            for proc in device.processes:
                groups.setdefault(proc.gpu_instance_id, []).append(proc)
            for instance, members in sorted(groups.items(), key=lambda item: (item[0] is None, item[0] or 0)):
                procs = competing(members)
                if instance is not None and len(procs) > limit:
                    findings.append(_finding(device, procs, options, instance))
            continue
        procs = competing(device.processes)
        if len(procs) > limit:
            findings.append(_finding(device, procs, options, None))
    return findings


def _finding(device: GpuDevice, procs: Sequence[GpuProcess], options: NodeOptions, instance: int | None) -> Finding:
    util = device.utilization_gpu_pct
    if util is None or instance is not None:
        severity, state = Severity.LOW, "utilisation not known"
    elif util >= options.threshold(RULE.code, "BUSY_UTIL_PCT", BUSY_UTIL_PCT):
        severity, state = Severity.MEDIUM, f"at {util:.0f}% utilisation"
    else:
        severity, state = Severity.INFO, f"idle enough ({util:.0f}% utilisation) to share without contending"
    where = device.label if instance is None else f"GPU {device.index} MIG instance GI {instance}"
    return RULE.finding(
        f"{where} is shared by {len(procs)} processes, {state}: "
        + ", ".join(f"{p.name or '?'}[{p.pid}] {gib(p.used_memory_bytes)} GiB" for p in procs[:4]),
        {
            "gpu": device.index,
            "gpu_instance_id": instance,
            "processes": [{"pid": p.pid, "name": p.name, "used_gib": gib(p.used_memory_bytes), "kind": p.kind}
                          for p in procs[:20]],
            "utilization_gpu_pct": util,
            "ignored_without_memory_figure": sum(
                1 for p in device.processes if p.kind != "graphics" and p.used_memory_bytes is None),
        },
        severity=severity,
        location=gpu_location(device) if instance is None else Location(file=where),
    )
