"""N003 gpu-throttling: GPU clocks held down by thermal, power or hardware slowdown.

What it detects:
    Active clock event ("throttle") reasons other than the benign ones: software power cap (0x4), hardware slowdown
    (0x8), software thermal slowdown (0x20), hardware thermal slowdown (0x40), hardware power brake (0x80). Idle
    (0x1), application clocks (0x2), sync boost (0x10) and display clocks (0x100) are ignored: they are not faults.

Why it matters:
    A throttled GPU runs the same work slower: thermal and hardware slowdowns cut clocks by half or more, and the
    job's step time grows while nothing in the application changed. In a multi-GPU job one throttled GPU slows
    every rank to its pace.

How it is measured:
    NVML ``nvmlDeviceGetCurrentClocksEventReasons`` (older: ``...ClocksThrottleReasons``) or nvidia-smi's
    ``<clocks_event_reasons>`` / ``<clocks_throttle_reasons>``, with the SM clock against its maximum and the
    temperature and power draw as evidence. Severity: ``high`` for thermal or hardware slowdown and power brake;
    ``low`` for the software power cap alone (normal at full load on many boards, but it caps clocks); ``medium``
    when the power cap holds the SM clock below :data:`POWER_CAP_CLOCK_FRACTION` of its maximum. Throttling comes
    and goes with load and heat: under ``--watch`` a GPU that was throttled in at least
    :data:`WATCH_THROTTLED_SHARE` of the samples gets a ``medium`` finding even when the final snapshot is clean.

Fix:
    Thermal: check airflow, fan and chassis cooling, inlet temperature, and dust; compare with neighbouring GPUs.
    Power brake or hardware slowdown: check PSUs and power cabling, and the BMC's event log. Power cap: check the
    limit (``nvidia-smi -q -d POWER``) against the board's default.
"""

from __future__ import annotations

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.node.evidence import GpuDevice, NodeEvidence
from infradoctor.node.gpu.base import BENIGN_REASON_MASK, active_reasons
from infradoctor.node.rules._common import NodeOptions, gpu_location

RULE = Rule(
    "N003",
    "gpu-throttling",
    Severity.MEDIUM,
    "GPU clocks are throttled",
    fix="Thermal: check cooling and airflow; power: check power cap and PSU; HW slowdown: inspect the board.",
    risk="None.",
    commands=("node",),
)

SEVERE_REASONS = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})
"""Reasons that mean a fault (heat, power delivery, hardware) rather than normal power management."""
POWER_CAP_CLOCK_FRACTION = 0.7
"""Under a power cap alone, an SM clock below this share of its maximum raises the severity to medium."""
WATCH_THROTTLED_SHARE = 0.1
"""Share of ``--watch`` samples with a non-benign reason active at which a GPU counts as throttled."""


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per GPU with a non-benign clock event reason active."""
    findings = []
    for device in evidence.gpu.devices:
        mask = device.clock_event_reasons
        if not mask or not mask & ~BENIGN_REASON_MASK:
            findings.extend(_throttled_during_watch(evidence, device, options))
            continue
        reasons = [r for r in active_reasons(mask) if not r.benign]
        names = [r.name for r in reasons]
        clock_fraction = (
            device.sm_clock_mhz / device.max_sm_clock_mhz
            if device.sm_clock_mhz is not None and device.max_sm_clock_mhz
            else None
        )
        if SEVERE_REASONS & set(names):
            severity = Severity.HIGH
        elif clock_fraction is not None and clock_fraction < options.threshold(
            RULE.code, "POWER_CAP_CLOCK_FRACTION", POWER_CAP_CLOCK_FRACTION
        ):
            severity = Severity.MEDIUM
        else:
            severity = Severity.LOW
        clock_text = (
            f", SM clock {device.sm_clock_mhz}/{device.max_sm_clock_mhz} MHz" if clock_fraction is not None else ""
        )
        temp_text = f", {device.temperature_c:.0f} C" if device.temperature_c is not None else ""
        findings.append(
            RULE.finding(
            f"{device.label} throttled: {', '.join(names)}{clock_text}{temp_text}",
                {
                    "gpu": device.index,
                    "name": device.name,
                    "reasons": names,
                    "reasons_mask": hex(mask),
                    "meanings": [r.meaning for r in reasons],
                    "sm_clock_mhz": device.sm_clock_mhz,
                    "max_sm_clock_mhz": device.max_sm_clock_mhz,
                    "sm_clock_fraction": round(clock_fraction, 3) if clock_fraction is not None else None,
                    "temperature_c": device.temperature_c,
                    "power_draw_w": device.power_draw_w,
                    "power_limit_w": device.power_limit_w,
                    "utilization_gpu_pct": device.utilization_gpu_pct,
                },
                severity=severity,
                location=gpu_location(device),
            )
        )
    return findings


def _throttled_during_watch(evidence: NodeEvidence, device: GpuDevice, options: NodeOptions) -> list[Finding]:
    """A finding when the GPU was throttled in enough watch samples (it may have recovered by the snapshot)."""
    if evidence.watch is None:
        return []
    summary = evidence.watch.metrics.get(f"gpu{device.index}_throttle")
    if summary is None or summary.count == 0:
        return []
    share = summary.mean
    if share < options.threshold(RULE.code, "WATCH_THROTTLED_SHARE", WATCH_THROTTLED_SHARE):
        return []
    clocks = evidence.watch.metrics.get(f"gpu{device.index}_sm_clock_mhz")
    temps = evidence.watch.metrics.get(f"gpu{device.index}_temp_c")
    return [
        RULE.finding(
            f"{device.label} throttled in {100 * share:.0f}% of {summary.count} samples during the watch",
            {
                "gpu": device.index,
                "name": device.name,
                "throttled_share": round(share, 3),
                "samples": summary.count,
                "sm_clock_min_mhz": clocks.min if clocks else None,
                "max_sm_clock_mhz": device.max_sm_clock_mhz,
                "temperature_max_c": temps.max if temps else None,
            },
            severity=Severity.MEDIUM,
            location=gpu_location(device),
        )
    ]
