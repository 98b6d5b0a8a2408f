"""N004 gpu-memory-pressure: a GPU's memory is nearly full.

What it detects:
    A GPU whose framebuffer memory is more than :data:`USED_FRACTION` used.

Why it matters:
    Near-full GPU memory leaves no room for a larger batch, a longer sequence or fragmentation: the next allocation
    fails with CUDA out of memory, or the allocator spends time freeing and retrying. A process that is not part of
    the job may hold the memory.

How it is measured:
    NVML ``nvmlDeviceGetMemoryInfo`` (or nvidia-smi's ``<fb_memory_usage>``): used / total. The processes holding
    memory on the GPU are listed as evidence. Severity ``high`` above :data:`CRITICAL_FRACTION`.

Fix:
    Identify the processes holding memory (evidence); stop strays. For the job itself: smaller batch or sequence
    length, activation checkpointing, reduced precision, or set the framework's memory fraction deliberately (note
    that vLLM and JAX reserve most of the memory by design).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.node.evidence import NodeEvidence
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
    """One finding per GPU above the threshold."""
    limit = options.threshold(RULE.code, "USED_FRACTION", USED_FRACTION)
    findings = []
    for device in evidence.gpu.devices:
        fraction = device.memory_used_fraction
        if fraction is None or fraction <= limit:
            continue
        procs = sorted(device.processes, key=lambda p: -(p.used_memory_bytes or 0))
        findings.append(
            RULE.finding(
            f"{device.label} memory {pct(fraction)}% used "
                f"({gib(device.memory_used_bytes)} of {gib(device.memory_total_bytes)} GiB)",
                {
                    "gpu": device.index,
                    "used_fraction": round(fraction, 4),
                    "used_gib": gib(device.memory_used_bytes),
                    "total_gib": gib(device.memory_total_bytes),
                    "processes": [
                        {"pid": p.pid, "name": p.name, "used_gib": gib(p.used_memory_bytes)} for p in procs[:10]
                    ],
                },
                severity=Severity.HIGH if fraction > CRITICAL_FRACTION else None,
                location=gpu_location(device),
            )
        )
    return findings
