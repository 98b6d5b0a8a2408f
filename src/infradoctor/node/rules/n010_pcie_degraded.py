"""N010 pcie-degraded: a GPU's PCIe link is degraded, judged on evidence of a fault rather than width alone.

What it detects:
    - link errors: the PCIe replay counter growing over an observation window (``--watch``, a fleet range) of at
      least :data:`MIN_WINDOW_S` seconds at :data:`REPLAY_RATE_PER_MIN` or more per minute;
    - a busy GPU (utilisation at least :data:`BUSY_UTIL_PCT` percent) whose link runs below the highest
      generation both the GPU and the host support (the host's maximum counts: a gen5 card in a gen4 slot runs
      gen4 by design);
    - a link narrower than the GPU's maximum width. Alone this is a note (``info``): laptops, x8/x8 desktop
      boards and many cloud VMs wire x8 by design and say nothing of it. It is a fault when the link also
      replays, or when another GPU of the same model in the same machine runs wider.

Why it matters:
    Host-device copies (input batches, weights at start-up, KV-cache offload, NCCL traffic through the host) run at
    the link's speed: x8 halves the bandwidth, a generation down halves it again. The job is slower with no sign in
    the application. Replays are retransmissions of corrupted packets: a badly seated card, riser or cable, whose
    errors make the link train down, stall transfers, and end in Xid 79 (fallen off the bus).

How it is measured:
    NVML ``nvmlDeviceGetCurrPcieLinkWidth`` / ``...MaxPcieLinkWidth``, ``...CurrPcieLinkGeneration`` /
    ``...MaxPcieLinkGeneration`` and ``nvmlDeviceGetPcieReplayCounter``; or nvidia-smi's ``<pci_gpu_link_info>``
    (``max_host_link_gen``, ``max_device_link_gen``) and ``<replay_counter>``; or dcgm-exporter's
    ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER``. The replay counter of one snapshot counts since the driver loaded: it is
    shown as evidence, and judged only as growth over a window. Idle GPUs lower their link generation to save
    power (gen 1 at idle is normal), so generation is judged only under load. Severity: ``medium`` for replay
    growth at the rate, and for a narrow link that replays or is narrower than its peers; ``low`` for a busy GPU
    below its generation (``medium`` if it also replays); ``info`` for a narrow link alone.

Fix:
    Width or replays: drain the node, reseat the GPU or riser, check the slot's bifurcation/link settings in the
    BIOS, and compare with the other GPUs. Generation under load: check the BIOS PCIe generation setting and the
    replay counter (link errors make the link train down).
"""

from __future__ import annotations

from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.node.evidence import GpuDevice, NodeEvidence
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
REPLAY_RATE_PER_MIN = 8.0
"""Replay counter growth per minute over a window that counts as link errors (DCGM's health check uses 8)."""
MIN_WINDOW_S = 10.0
"""Shortest window over which a replay rate is judged."""


def _replay_rate_per_min(device: GpuDevice) -> float | None:
    window = device.window
    if window is None or window.pcie_replays is None or window.seconds < MIN_WINDOW_S:
        return None
    return 60.0 * window.pcie_replays / window.seconds


def _wider_peer(device: GpuDevice, devices: tuple[GpuDevice, ...]) -> GpuDevice | None:
    """Another GPU of the same model in the same machine whose link runs wider."""
    if device.pcie_width_current is None or not device.name:
        return None
    for other in devices:
        if (other.index != device.index and other.name == device.name and other.pcie_width_current is not None
                and other.pcie_width_current > device.pcie_width_current):
            return other
    return None


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per GPU with a degraded link."""
    findings = []
    for device in evidence.gpu.devices:
        finding = _judge(device, evidence.gpu.devices, options)
        if finding is not None:
            findings.append(finding)
    return findings


def _judge(device: GpuDevice, devices: tuple[GpuDevice, ...], options: NodeOptions) -> Finding | None:
    width, width_max = device.pcie_width_current, device.pcie_width_max
    gen, gen_max = device.pcie_gen_current, device.pcie_gen_max
    width_low = width is not None and width_max is not None and 0 < width < width_max
    busy_limit = options.threshold(RULE.code, "BUSY_UTIL_PCT", BUSY_UTIL_PCT)
    busy = device.utilization_gpu_pct is not None and device.utilization_gpu_pct >= busy_limit
    gen_low = busy and gen is not None and gen_max is not None and 0 < gen < gen_max
    rate = _replay_rate_per_min(device)
    replaying = rate is not None and rate >= options.threshold(RULE.code, "REPLAY_RATE_PER_MIN", REPLAY_RATE_PER_MIN)
    growing = device.window is not None and (device.window.pcie_replays or 0) > 0
    peer = _wider_peer(device, devices) if width_low else None
    if not (width_low or gen_low or replaying):
        return None
    parts = []
    if replaying and rate is not None:
        parts.append(f"{rate:.1f} replays/min over {device.window.seconds if device.window else 0:.0f} s")
    if width_low:
        parts.append(f"x{width} of x{width_max}" + (f" (GPU {peer.index}, same model, runs x{peer.pcie_width_current})"
                                                    if peer is not None else ""))
    if gen_low:
        parts.append(f"gen {gen} of {gen_max} at {device.utilization_gpu_pct:.0f}% utilisation")
    elif gen is not None and gen_max is not None:
        parts.append(f"gen {gen}/{gen_max}")
    if replaying or (width_low and (growing or peer is not None)):
        severity = Severity.MEDIUM
    elif gen_low:
        severity = Severity.MEDIUM if growing else Severity.LOW
    else:
        severity = Severity.INFO
    title = f"{device.label} PCIe link " + ("degraded: " if severity is not Severity.INFO else "narrower than the "
                                           "GPU's maximum (slot or board wiring; no sign of a fault): ")
    evidence: dict[str, Any] = {
        "gpu": device.index,
        "name": device.name,
        "width_current": width,
        "width_max": width_max,
        "gen_current": gen,
        "gen_max": gen_max,
        "gen_max_device": device.pcie_gen_max_device,
        "gen_max_host": device.pcie_gen_max_host,
        "utilization_gpu_pct": device.utilization_gpu_pct,
        "replay_count": device.pcie_replay_count,
        "replays_in_window": device.window.pcie_replays if device.window is not None else None,
        "replays_per_min": round(rate, 2) if rate is not None else None,
        "width_degraded": width_low,
        "wider_peer_gpu": peer.index if peer is not None else None,
        "gen_degraded_under_load": gen_low,
    }
    return RULE.finding(title + ", ".join(parts), evidence, severity=severity, location=gpu_location(device))
