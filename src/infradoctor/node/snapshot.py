"""One node snapshot: gather the evidence, run the rules, and build the result.

``metrics`` holds the evidence itself (so a stored run can be evaluated again: :func:`evidence_from_metrics`) plus a
flat headline; see :mod:`infradoctor.node` for the layout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infradoctor.findings import Finding, run_rules
from infradoctor.node.evidence import (
    GpuExpectation,
    GpuSnapshot,
    HostEvidence,
    KernelLogEvidence,
    NodeEvidence,
    Note,
    WatchSummary,
    from_dict,
    to_dict,
)
from infradoctor.node.expect import probe_expectation
from infradoctor.node.gpu import GpuBackend, select_backend
from infradoctor.node.gpu.base import BENIGN_REASON_MASK, active_reasons
from infradoctor.node.kernel import read_kernel_log
from infradoctor.node.rules import NodeOptions
from infradoctor.node.system import DEFAULT_WINDOW_S, probe_host
from infradoctor.result import ErrorNote, Result, new_result


@dataclass(frozen=True)
class NodeRequest:
    """What to probe."""

    gpu_backend: str = "auto"
    """``auto``, ``nvml``, ``smi`` or ``none``."""
    smi_xml: Path | None = None
    """Evaluate this saved ``nvidia-smi -q -x`` document instead of this machine's GPUs."""
    nvml_record: Path | None = None
    """Evaluate these recorded NVML values instead of this machine's GPUs."""
    kernel_log: Path | None = None
    """Read Xid events from this file instead of dmesg / journalctl / kern.log."""
    host: bool = True
    """Probe the host (CPU, memory, disks, sockets, processes)."""
    window_s: float = DEFAULT_WINDOW_S
    """CPU measurement window."""


def open_backend(request: NodeRequest) -> tuple[GpuBackend, tuple[Note, ...]]:
    """The GPU backend the request asks for."""
    return select_backend(request.gpu_backend, smi_xml=request.smi_xml, nvml_record=request.nvml_record)


def collect_evidence(
    request: NodeRequest,
    *,
    backend: GpuBackend | None = None,
    watch: WatchSummary | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> NodeEvidence:
    """Run every probe once; nothing here raises for missing hardware or unreadable sources."""
    notes: list[Note] = []
    own_backend = backend is None
    if backend is None:
        backend, selection_notes = open_backend(request)
        notes.extend(selection_notes)
    try:
        probe = backend.probe()
    finally:
        if own_backend:
            backend.close()
    notes.extend(probe.notes)
    host: HostEvidence | None = None
    if request.host:
        host, host_notes = probe_host(window_s=request.window_s, sleep=sleep)
        notes.extend(host_notes)
    recorded = request.smi_xml is not None or request.nvml_record is not None
    if recorded and request.kernel_log is None:
        # The GPU evidence comes from another machine: this machine's kernel log would mix two nodes' events.
        kernel = KernelLogEvidence(
            source=None,
            lines_read=0,
            xid_events=(),
            tried=("this machine's log skipped: the GPU evidence is recorded; pass --kernel-log with its node's log",),
        )
        notes.append(Note("kernel-log", kernel.tried[0]))
    else:
        kernel = read_kernel_log(request.kernel_log)
    if kernel.source is None and not recorded:
        notes.append(Note("kernel-log", "no kernel log readable: " + "; ".join(kernel.tried)))
    return NodeEvidence(
        host=host,
        gpu=probe.snapshot,
        kernel=kernel,
        expectation=probe_expectation(),
        watch=watch,
        notes=tuple(notes),
    )


def _max(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def headline(evidence: NodeEvidence) -> dict[str, float]:
    """The key numbers, flat, with units in the names (None values left out)."""
    devices = evidence.gpu.devices
    out: dict[str, float | int | None] = {
        "gpus": len(devices),
        "gpu_util_max_pct": _max([d.utilization_gpu_pct for d in devices]),
        "gpu_memory_used_max_pct": _max(
            [100.0 * f if (f := d.memory_used_fraction) is not None else None for d in devices]
        ),
        "gpu_temp_max_c": _max([d.temperature_c for d in devices]),
        "gpu_power_total_w": sum(d.power_draw_w for d in devices if d.power_draw_w is not None) if devices else None,
        "gpus_throttled": sum(
            1 for d in devices if d.clock_event_reasons and d.clock_event_reasons & ~BENIGN_REASON_MASK
        ),
        "xid_events": evidence.kernel.xid_events_total,
    }
    host = evidence.host
    if host is not None:
        cores = max(1, host.cpu.usable_cores)
        out.update(
            {
                "cpu_util_pct": host.cpu.utilization_pct,
                "load_1m_per_core": round(host.cpu.load_1m / cores, 3) if host.cpu.load_1m is not None else None,
                "memory_used_pct": round(100.0 * (1.0 - host.memory.available_fraction), 2),
                "swap_used_pct": round(100.0 * host.memory.swap_used_fraction, 2),
                "disk_used_max_pct": _max([round(100.0 * d.used_fraction, 2) for d in host.disks]),
                "tcp_time_wait": host.sockets.time_wait if host.sockets is not None else None,
            }
        )
        if host.fds.process_open is not None and host.fds.process_soft_limit:
            out["fds_used_pct"] = round(100.0 * host.fds.process_open / host.fds.process_soft_limit, 3)
    return {k: v if isinstance(v, int) else round(float(v), 4) for k, v in out.items() if v is not None}


def node_metrics(evidence: NodeEvidence, distributions: Mapping[str, list[float]] | None = None) -> dict[str, Any]:
    """The result's ``metrics``: headline, the evidence by part, and derived views for humans."""
    gpu = to_dict(evidence.gpu)
    for device, raw in zip(evidence.gpu.devices, gpu["devices"], strict=True):
        raw["clock_event_reason_names"] = [r.name for r in active_reasons(device.clock_event_reasons)]
    xid_by_code: dict[str, int] = {}
    for event in evidence.kernel.xid_events:
        xid_by_code[str(event.code)] = xid_by_code.get(str(event.code), 0) + 1
    metrics: dict[str, Any] = {
        "headline": headline(evidence),
        "host": to_dict(evidence.host) if evidence.host is not None else None,
        "gpu": gpu,
        "kernel_log": {**to_dict(evidence.kernel), "xid_by_code": xid_by_code},
        "gpu_expected": {**to_dict(evidence.expectation), "reasons": list(evidence.expectation.reasons)},
        "watch": to_dict(evidence.watch) if evidence.watch is not None else None,
    }
    if distributions:
        metrics["distributions"] = {k: list(v) for k, v in distributions.items()}
    return metrics


def evidence_from_metrics(metrics: Mapping[str, Any]) -> NodeEvidence:
    """Rebuild the evidence of a stored node result (inverse of :func:`node_metrics`)."""
    kernel = {k: v for k, v in metrics["kernel_log"].items() if k != "xid_by_code"}
    expected = {k: v for k, v in metrics["gpu_expected"].items() if k != "reasons"}
    return NodeEvidence(
        host=from_dict(HostEvidence, metrics["host"]) if metrics.get("host") else None,
        gpu=from_dict(GpuSnapshot, metrics["gpu"]),
        kernel=from_dict(KernelLogEvidence, kernel),
        expectation=from_dict(GpuExpectation, expected),
        watch=from_dict(WatchSummary, metrics["watch"]) if metrics.get("watch") else None,
    )


def target_of(request: NodeRequest, evidence: NodeEvidence) -> dict[str, Any]:
    """The result's ``target``: the host, and the recorded files when evidence came from files."""
    target: dict[str, Any] = {"host": evidence.host.hostname if evidence.host else None}
    if request.smi_xml is not None:
        target["smi_xml"] = str(request.smi_xml)
    if request.nvml_record is not None:
        target["nvml_record"] = str(request.nvml_record)
    if request.kernel_log is not None:
        target["kernel_log"] = str(request.kernel_log)
    target["gpu_backend"] = evidence.gpu.backend
    return target


def build_result(
    request: NodeRequest,
    evidence: NodeEvidence,
    *,
    started_at: str,
    duration_s: float,
    options: NodeOptions | None = None,
    distributions: Mapping[str, list[float]] | None = None,
) -> Result:
    """Rules over the evidence, wrapped as a result; notes become the result's errors (a partial result)."""
    findings: list[Finding] = run_rules(evidence, options)
    return new_result(
        "node",
        started_at=started_at,
        duration_s=duration_s,
        target=target_of(request, evidence),
        metrics=node_metrics(evidence, distributions),
        findings=findings,
        errors=[ErrorNote(n.source, n.message) for n in evidence.notes],
    )
