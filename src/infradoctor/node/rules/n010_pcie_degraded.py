"""N010 pcie-degraded: a GPU's PCIe link runs narrower (or, under load, slower) than it can.

What it detects:
    A GPU whose current PCIe link width is below the maximum its device and slot support (e.g. x8 on an x16 slot),
    or whose link generation is below the maximum while the GPU is busy (at least :data:`BUSY_UTIL_PCT` percent).

Why it matters:
    Host-device copies (input batches, weights at start-up, KV-cache offload, NCCL traffic through the host) run at
    the link's speed: x8 halves the bandwidth, a generation down halves it again. The job is slower with no sign in
    the application. A narrow link usually means a badly seated card or riser, a damaged slot, or a BIOS
    bifurcation setting.

How it is measured:
    NVML ``nvmlDeviceGetCurrPcieLinkWidth`` / ``...MaxPcieLinkWidth`` and ``...CurrPcieLinkGeneration`` /
    ``...MaxPcieLinkGeneration`` (or nvidia-smi's ``<pci_gpu_link_info>``). Width is the strong signal: it does not
    change with load. Generation is only judged on a busy GPU, because idle GPUs lower the link generation to save
    power (a gen-1 link on an idle GPU is normal); an idle GPU with a lower generation gets no finding. Severity:
    ``medium`` for width, ``low`` for generation alone.

Fix:
    Width: drain the node, reseat the GPU or riser, check the slot's bifurcation/link settings in the BIOS, and
    compare with the other GPUs. Generation under load: check the BIOS PCIe generation setting and the replay
    counter (link errors make the link train down).
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.node.evidence import NodeEvidence
from infradoctor.node.rules._common import NodeOptions, gpu_location

RULE = Rule(
    "N010",
    "pcie-degraded",
    Severity.MEDIUM,
    "GPU PCIe link runs below its maximum",
    fix="Reseat the card or riser, check BIOS slot settings; an idle GPU may downshift generation (check under load).",
    risk="Reseating needs the node drained.",
    commands=("node",),
)

BUSY_UTIL_PCT = 30.0
"""GPU utilisation at or above which a generation below the maximum counts (idle GPUs downshift by design)."""


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per GPU with a degraded link."""
    busy_limit = options.threshold(RULE.code, "BUSY_UTIL_PCT", BUSY_UTIL_PCT)
    findings = []
    for device in evidence.gpu.devices:
        width_low = (
            device.pcie_width_current is not None
            and device.pcie_width_max is not None
            and 0 < device.pcie_width_current < device.pcie_width_max
        )
        busy = device.utilization_gpu_pct is not None and device.utilization_gpu_pct >= busy_limit
        gen_low = (
            busy
            and device.pcie_gen_current is not None
            and device.pcie_gen_max is not None
            and 0 < device.pcie_gen_current < device.pcie_gen_max
        )
        if not (width_low or gen_low):
            continue
        parts = []
        if width_low:
            parts.append(f"x{device.pcie_width_current} of x{device.pcie_width_max}")
        if gen_low:
            parts.append(f"gen {device.pcie_gen_current} of {device.pcie_gen_max} at "
                         f"{device.utilization_gpu_pct:.0f}% utilisation")
        elif device.pcie_gen_current is not None and device.pcie_gen_max is not None:
            parts.append(f"gen {device.pcie_gen_current}/{device.pcie_gen_max}")
        findings.append(
            RULE.finding(
            f"{device.label} PCIe link degraded: " + ", ".join(parts),
                {
                    "gpu": device.index,
                    "name": device.name,
                    "width_current": device.pcie_width_current,
                    "width_max": device.pcie_width_max,
                    "gen_current": device.pcie_gen_current,
                    "gen_max": device.pcie_gen_max,
                    "utilization_gpu_pct": device.utilization_gpu_pct,
                    "replay_count": device.pcie_replay_count,
                    "width_degraded": width_low,
                    "gen_degraded_under_load": gen_low,
                },
                severity=None if width_low else Severity.LOW,
                location=gpu_location(device),
            )
        )
    return findings
