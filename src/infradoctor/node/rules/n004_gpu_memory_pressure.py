"""N004 gpu-memory-pressure: a GPU's memory is nearly full.

What it detects:
    A GPU whose framebuffer memory is more than :data:`USED_FRACTION` used; on a GPU in MIG mode, each MIG
    instance whose own slice is (a process in one instance cannot use another's memory, so a full slice fails its
    jobs while the GPU as a whole looks half empty).

Why it matters:
    Near-full GPU memory leaves no room for a larger batch, a longer sequence or fragmentation: the next allocation
    fails with CUDA out of memory, or the allocator spends time freeing and retrying. A process that is not part of
    the job may hold the memory.

How it is measured:
    NVML ``nvmlDeviceGetMemoryInfo`` (or nvidia-smi's ``<fb_memory_usage>``, dcgm-exporter's ``DCGM_FI_DEV_FB_USED``
    and ``..._FREE``): used / total, per GPU, and per MIG device where the GPU is in MIG mode (NVML on the MIG
    device handle, nvidia-smi's ``<mig_devices>``). The processes holding memory on the GPU (or in the instance)
    are listed as evidence. Severity ``high`` above :data:`CRITICAL_FRACTION`.

Fix:
    Identify the processes holding memory (evidence); stop strays. For the job itself: smaller batch or sequence
    length, activation checkpointing, reduced precision, or set the framework's memory fraction deliberately (note
    that vLLM and JAX reserve most of the memory by design).
"""

from __future__ import annotations

from collections.abc import Iterable

from infradoctor.findings import Finding, Location, Rule, Severity
from infradoctor.node.evidence import GpuDevice, GpuProcess, NodeEvidence
from infradoctor.node.rules._common import NodeOptions, gib, gpu_location, pct

RULE = Rule(
    "N004",
    "gpu-memory-pressure",
    Severity.MEDIUM,
    "GPU memory is nearly full",
    fix="Reduce batch size or activation memory (checkpointing, reduced precision), or free other processes.",
    risk="Smaller batches lower throughput.",
    commands=("node",),
)

USED_FRACTION = 0.95
"""Share of GPU memory in use above which the GPU counts as under memory pressure."""
CRITICAL_FRACTION = 0.99
"""Share above which severity is high."""


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per GPU (or MIG instance) above the threshold."""
    limit = options.threshold(RULE.code, "USED_FRACTION", USED_FRACTION)
    findings = []
    for device in evidence.gpu.devices:
        if device.mig_enabled and device.mig_devices:
            findings.extend(_mig_findings(device, limit))
            continue
        fraction = device.memory_used_fraction
        if fraction is None or fraction <= limit:
            continue
        findings.append(
            RULE.finding(
                f"{device.label} memory {pct(fraction)}% used "
                f"({gib(device.memory_used_bytes)} of {gib(device.memory_total_bytes)} GiB)",
                {
                    "gpu": device.index,
                    "used_fraction": round(fraction, 4),
                    "used_gib": gib(device.memory_used_bytes),
                    "total_gib": gib(device.memory_total_bytes),
                    "processes": _processes(device.processes),
                },
                severity=Severity.HIGH if fraction > CRITICAL_FRACTION else None,
                location=gpu_location(device),
            )
        )
    return findings


def _processes(processes: Iterable[GpuProcess]) -> list[dict[str, object]]:
    ordered = sorted(processes, key=lambda p: -(p.used_memory_bytes or 0))
    return [{"pid": p.pid, "name": p.name, "used_gib": gib(p.used_memory_bytes)} for p in ordered[:10]]


def _mig_findings(device: GpuDevice, limit: float) -> list[Finding]:
    """The MIG instances of ``device`` whose own memory is above the threshold."""
    findings = []
    for mig in device.mig_devices:
        fraction = mig.memory_used_fraction
        if fraction is None or fraction <= limit:
            continue
        inside = [p for p in device.processes
                  if p.gpu_instance_id == mig.gpu_instance_id
                  and (p.compute_instance_id is None or p.compute_instance_id == mig.compute_instance_id)]
        findings.append(
            RULE.finding(
                f"{mig.label(device)} memory {pct(fraction)}% used "
                f"({gib(mig.memory_used_bytes)} of {gib(mig.memory_total_bytes)} GiB of its slice)",
                {
                    "gpu": device.index,
                    "mig_device": mig.index,
                    "gpu_instance_id": mig.gpu_instance_id,
                    "compute_instance_id": mig.compute_instance_id,
                    "used_fraction": round(fraction, 4),
                    "used_gib": gib(mig.memory_used_bytes),
                    "total_gib": gib(mig.memory_total_bytes),
                    "processes": _processes(inside),
                },
                severity=Severity.HIGH if fraction > CRITICAL_FRACTION else None,
                location=Location(file=mig.label(device)),
            )
        )
    return findings
