"""N003 gpu-throttling: GPU clocks held down by heat, power delivery or a power cap while the GPU works.

What it detects:
    A GPU whose clocks are held down for a reason that costs the work speed:

    - a fault reason, whatever the load: hardware slowdown (0x8), hardware thermal slowdown (0x40), hardware power
      brake (0x80, an external signal from the PSU or chassis) or software thermal slowdown (0x20);
    - the software power cap (0x4) only while the GPU works (utilisation at least :data:`WORKING_UTIL_PCT` percent,
      an active performance state, and a draw of at least :data:`POWER_CAP_MIN_DRAW_FRACTION` of the limit) with
      its SM clock below :data:`CLOCK_AT_MAX_FRACTION` of the maximum. An idle GPU (P8, 0%, 35 W of 350 W) with the
      power-cap bit set is at idle clocks, not throttled; a GPU at its maximum clock is not held down.

    Idle (0x1), application clocks (0x2), sync boost (0x10) and display clocks (0x100) are never throttling.

Why it matters:
    A throttled GPU runs the same work slower: thermal and hardware slowdowns cut clocks by half or more, and the
    job's step time grows while nothing in the application changed. In a multi-GPU job one throttled GPU slows
    every rank to its pace.

How it is measured:
    The active clock event reasons (NVML ``nvmlDeviceGetCurrentClocksEventReasons``, nvidia-smi's
    ``<clocks_event_reasons>`` / ``Clocks Event Reasons``, dcgm-exporter's ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``)
    with utilisation, performance state, power draw against the limit and the SM clock against its maximum.
    The reasons' time counters (``clocks_event_reasons_counters``, NVML violation status) are cumulative since the
    driver loaded: one snapshot shows them as history only. Over an observation window (``--watch``, a fleet
    range) their growth is the share of time each reason held the clocks, which is judged instead of one sampled
    bit: a reason holding the clocks for at least :data:`WINDOW_SHARE` of the window counts (the power cap only
    while the GPU worked). Without counters, the share of samples judged throttled counts the same way.
    Severity: ``high`` for a fault reason; ``low`` for the power cap, ``medium`` when it holds the SM clock below
    :data:`POWER_CAP_CLOCK_FRACTION` of its maximum.

Fix:
    Thermal: check airflow, fan and chassis cooling, inlet temperature, and dust; compare with neighbouring GPUs.
    Power brake or hardware slowdown: check PSUs and power cabling, and the BMC's event log. Power cap: check the
    limit (``nvidia-smi -q -d POWER``) against the board's default; at full load on many boards it is normal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infradoctor.findings import Finding, Rule, Severity
from infradoctor.node.evidence import GpuDevice, GpuWindow, NodeEvidence
from infradoctor.node.gpu.base import REASON_BY_NAME, ClockEventReason, active_reasons
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
WORKING_UTIL_PCT = 10.0
"""GPU utilisation at or above which the power cap can cost the work anything."""
IDLE_PERFORMANCE_STATE = 8
"""Performance states at or above this (P8, P12) are idle: the clocks are low because nothing runs."""
POWER_CAP_MIN_DRAW_FRACTION = 0.5
"""Under the power cap, a draw below this share of the limit means the cap is not what holds the clocks."""
CLOCK_AT_MAX_FRACTION = 0.98
"""An SM clock at or above this share of its maximum is not held down, whatever bit is set."""
POWER_CAP_CLOCK_FRACTION = 0.7
"""Under a power cap alone, an SM clock below this share of its maximum raises the severity to medium."""
WINDOW_SHARE = 0.1
"""Share of an observation window in which a reason held the clocks (or samples were judged throttled) that counts."""


def working(device: GpuDevice, options: NodeOptions | None = None) -> bool | None:
    """Whether the GPU is doing work now: True, False, or None when utilisation and P-state are both unknown."""
    opts = options or NodeOptions()
    if device.utilization_gpu_pct is not None:
        return device.utilization_gpu_pct >= opts.threshold(RULE.code, "WORKING_UTIL_PCT", WORKING_UTIL_PCT)
    if device.performance_state is not None:
        return device.performance_state < IDLE_PERFORMANCE_STATE
    return None


def _clock_fraction(device: GpuDevice) -> float | None:
    if device.sm_clock_mhz is None or not device.max_sm_clock_mhz:
        return None
    return device.sm_clock_mhz / device.max_sm_clock_mhz


def _power_cap_holds(device: GpuDevice, options: NodeOptions) -> bool:
    """The power cap holds this GPU's clocks now: it works, draws near its limit, and runs below its top clock."""
    if working(device, options) is False:
        return False
    if device.performance_state is not None and device.performance_state >= IDLE_PERFORMANCE_STATE:
        return False
    if device.power_draw_w is not None and device.power_limit_w:
        floor = options.threshold(RULE.code, "POWER_CAP_MIN_DRAW_FRACTION", POWER_CAP_MIN_DRAW_FRACTION)
        if device.power_draw_w < floor * device.power_limit_w:
            return False
    fraction = _clock_fraction(device)
    return not (fraction is not None and fraction >= CLOCK_AT_MAX_FRACTION)


def throttling_reasons(device: GpuDevice, options: NodeOptions | None = None) -> tuple[ClockEventReason, ...]:
    """The active reasons that throttle this GPU now (faults always; the power cap only while it holds the work)."""
    opts = options or NodeOptions()
    reasons = [r for r in active_reasons(device.clock_event_reasons) if not r.benign]
    out = [r for r in reasons if r.name in SEVERE_REASONS]
    if any(r.name == "sw_power_cap" for r in reasons) and _power_cap_holds(device, opts):
        out.append(REASON_BY_NAME["sw_power_cap"])
    return tuple(sorted(out, key=lambda r: r.bit))


@RULE.check(NodeEvidence, NodeOptions)
def check(evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per throttled GPU: now, or over the observation window."""
    findings = []
    for device in evidence.gpu.devices:
        reasons = throttling_reasons(device, options)
        if reasons:
            findings.append(_snapshot_finding(device, reasons, options))
        elif device.window is not None:
            findings.extend(_window_findings(device, device.window, options))
    return findings


def _history(device: GpuDevice) -> dict[str, float]:
    return {name: seconds for name, seconds in device.clock_event_time_s.items() if seconds > 0}


def _severity(names: set[str], fraction: float | None, options: NodeOptions) -> Severity:
    if SEVERE_REASONS & names:
        return Severity.HIGH
    if fraction is not None and fraction < options.threshold(RULE.code, "POWER_CAP_CLOCK_FRACTION",
                                                             POWER_CAP_CLOCK_FRACTION):
        return Severity.MEDIUM
    return Severity.LOW


def _snapshot_finding(device: GpuDevice, reasons: tuple[ClockEventReason, ...], options: NodeOptions) -> Finding:
    names = [r.name for r in reasons]
    fraction = _clock_fraction(device)
    clock_text = f", SM clock {device.sm_clock_mhz}/{device.max_sm_clock_mhz} MHz" if fraction is not None else ""
    temp_text = f", {device.temperature_c:.0f} C" if device.temperature_c is not None else ""
    power_text = (f", {device.power_draw_w:.0f} of {device.power_limit_w:.0f} W"
                  if device.power_draw_w is not None and device.power_limit_w else "")
    evidence: dict[str, Any] = {
        "gpu": device.index,
        "name": device.name,
        "reasons": names,
        "reasons_mask": hex(device.clock_event_reasons or 0),
        "meanings": [r.meaning for r in reasons],
        "sm_clock_mhz": device.sm_clock_mhz,
        "max_sm_clock_mhz": device.max_sm_clock_mhz,
        "sm_clock_fraction": round(fraction, 3) if fraction is not None else None,
        "temperature_c": device.temperature_c,
        "power_draw_w": device.power_draw_w,
        "power_limit_w": device.power_limit_w,
        "utilization_gpu_pct": device.utilization_gpu_pct,
        "performance_state": device.performance_state,
        "held_since_driver_load_s": _history(device),
    }
    return RULE.finding(
        f"{device.label} throttled: {', '.join(names)}{clock_text}{power_text}{temp_text}",
        evidence,
        severity=_severity(set(names), fraction, options),
        location=gpu_location(device),
    )


def _window_findings(device: GpuDevice, window: GpuWindow, options: NodeOptions) -> list[Finding]:
    """A finding when, over the window, a reason held the clocks long enough (the GPU may be clean by the end)."""
    limit = options.threshold(RULE.code, "WINDOW_SHARE", WINDOW_SHARE)
    busy = window.utilization_gpu_mean_pct is None or window.utilization_gpu_mean_pct >= options.threshold(
        RULE.code, "WORKING_UTIL_PCT", WORKING_UTIL_PCT)
    held: Mapping[str, float] = {
        name: share for name, share in window.clock_event_share.items()
        if share >= limit and (name in SEVERE_REASONS or (name == "sw_power_cap" and busy))
    }
    evidence: dict[str, Any] = {
        "gpu": device.index,
        "name": device.name,
        "window_s": window.seconds,
        "samples": window.samples,
        "utilization_gpu_mean_pct": window.utilization_gpu_mean_pct,
        "max_sm_clock_mhz": device.max_sm_clock_mhz,
    }
    if held:
        text = ", ".join(f"{name} {100 * share:.0f}%" for name, share in sorted(held.items(), key=lambda i: -i[1]))
        return [RULE.finding(
            f"{device.label} held down over {window.seconds:.0f} s: {text} of the time",
            {**evidence, "held_share": {k: round(v, 4) for k, v in held.items()}},
            severity=_severity(set(held), None, options),
            location=gpu_location(device),
        )]
    share = window.throttled_sample_share
    if not window.clock_event_share and share is not None and share >= limit:
        return [RULE.finding(
            f"{device.label} throttled in {100 * share:.0f}% of {window.samples} samples over {window.seconds:.0f} s",
            {**evidence, "throttled_share": round(share, 3)},
            severity=Severity.MEDIUM,
            location=gpu_location(device),
        )]
    return []
