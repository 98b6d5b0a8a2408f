"""One node snapshot: gather the evidence, run the rules, and build the result.

``metrics`` holds the evidence itself (so a stored run can be evaluated again:
:func:`~infradoctor.node.metrics.evidence_from_metrics`) plus a flat headline; see
:class:`~infradoctor.node.metrics.NodeMetrics`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infradoctor.findings import Finding, run_rules
from infradoctor.node.evidence import HostEvidence, KernelLogEvidence, NodeEvidence, Note, WatchSummary
from infradoctor.node.expect import probe_expectation
from infradoctor.node.gpu import GpuBackend, GpuProbe, select_backend
from infradoctor.node.kernel import read_kernel_log
from infradoctor.node.metrics import NodeHeadline, NodeMetrics
from infradoctor.node.rules import NodeOptions
from infradoctor.node.rules.n003_gpu_throttling import throttling_reasons
from infradoctor.node.system import DEFAULT_WINDOW_S, probe_host
from infradoctor.result import ErrorNote, Result, new_result


@dataclass(frozen=True)
class NodeRequest:
    """What ``infradoctor node`` should look at: the options of :func:`infradoctor.node.run`."""

    gpu_backend: str = "auto"
    """``auto``, ``nvml``, ``smi`` or ``none``."""
    smi_xml: Path | None = None
    """Evaluate this saved ``nvidia-smi -q -x`` or ``nvidia-smi -q`` report instead of this machine's GPUs."""
    nvml_record: Path | None = None
    """Evaluate these recorded NVML values instead of this machine's GPUs."""
    kernel_log: Path | None = None
    """Read Xid events from this file instead of dmesg / journalctl / kern.log."""
    host: bool = True
    """Probe the host (CPU, memory, disks, sockets, processes)."""
    window_s: float = DEFAULT_WINDOW_S
    """CPU measurement window."""
    save_nvml_record: Path | None = None
    """Also record this machine's NVML values to this file."""
    watch: bool = False
    """Sample repeatedly (``--watch``) before the final snapshot."""
    interval_s: float = 1.0
    """Seconds between watch samples."""
    duration_s: float | None = None
    """Stop the watch after this long (None: until interrupted, at most a day)."""
    record: Path | None = None
    """Write every watch sample to this file as JSON lines."""
    rules: NodeOptions = field(default_factory=NodeOptions)
    """Options of the rules (threshold overrides)."""

    @property
    def recorded(self) -> bool:
        """The GPU evidence comes from a file, not from this machine."""
        return self.smi_xml is not None or self.nvml_record is not None


def open_backend(request: NodeRequest) -> tuple[GpuBackend, tuple[Note, ...]]:
    """The GPU backend the request asks for."""
    return select_backend(request.gpu_backend, smi_xml=request.smi_xml, nvml_record=request.nvml_record)


def collect_evidence(
    request: NodeRequest,
    *,
    backend: GpuBackend | None = None,
    probe: GpuProbe | None = None,
    watch: WatchSummary | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> NodeEvidence:
    """Run every probe once; nothing here raises for missing hardware or unreadable sources.

    ``probe`` is a GPU probe already taken (the recorded evidence, read first to refuse an unreadable file).
    """
    notes: list[Note] = []
    if probe is None:
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
    if request.recorded and request.kernel_log is None:
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
    if kernel.source is None and not request.recorded:
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


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def headline(evidence: NodeEvidence, options: NodeOptions | None = None) -> NodeHeadline:
    """The key numbers."""
    devices = evidence.gpu.devices
    memory: list[float | None] = []
    for device in devices:
        fractions = [m.memory_used_fraction for m in device.mig_devices] if device.mig_devices else []
        fractions.append(device.memory_used_fraction)
        memory.append(_max([100.0 * f for f in fractions if f is not None]))
    head = NodeHeadline(
        gpus=len(devices),
        xid_events=evidence.kernel.xid_events_total,
        gpus_throttled=sum(1 for d in devices if throttling_reasons(d, options)),
        gpu_util_max_pct=_round(_max([d.utilization_gpu_pct for d in devices])),
        gpu_memory_used_max_pct=_round(_max(memory)),
        gpu_temp_max_c=_round(_max([d.temperature_c for d in devices])),
        gpu_power_total_w=(_round(sum(d.power_draw_w for d in devices if d.power_draw_w is not None))
                           if any(d.power_draw_w is not None for d in devices) else None),
    )
    host = evidence.host
    if host is None:
        return head
    cores = max(1, host.cpu.usable_cores)
    fds = host.fds
    return dataclasses.replace(
        head,
        cpu_util_pct=_round(host.cpu.utilization_pct),
        load_1m_per_core=round(host.cpu.load_1m / cores, 3) if host.cpu.load_1m is not None else None,
        memory_used_pct=round(100.0 * (1.0 - host.memory.available_fraction), 2),
        swap_used_pct=round(100.0 * host.memory.swap_used_fraction, 2),
        disk_used_max_pct=_max([round(100.0 * d.used_fraction, 2) for d in host.disks]),
        tcp_time_wait=host.sockets.time_wait if host.sockets is not None else None,
        fds_used_pct=(round(100.0 * fds.process_open / fds.process_soft_limit, 3)
                      if fds.process_open is not None and fds.process_soft_limit else None),
    )


def node_metrics(
    evidence: NodeEvidence,
    distributions: Mapping[str, list[float]] | None = None,
    options: NodeOptions | None = None,
) -> NodeMetrics:
    """The result's typed metrics: headline and the evidence by part."""
    xid_by_code: dict[str, int] = {}
    for event in evidence.kernel.xid_events:
        xid_by_code[str(event.code)] = xid_by_code.get(str(event.code), 0) + 1
    return NodeMetrics(
        headline=headline(evidence, options),
        gpu=evidence.gpu,
        kernel_log=evidence.kernel,
        gpu_expected=evidence.expectation,
        host=evidence.host,
        watch=evidence.watch,
        xid_by_code=xid_by_code,
        distributions={k: list(v) for k, v in (distributions or {}).items()},
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
    rule_options = options or request.rules
    findings: list[Finding] = run_rules(evidence, rule_options)
    return new_result(
        "node",
        started_at=started_at,
        duration_s=duration_s,
        target=target_of(request, evidence),
        metrics=node_metrics(evidence, distributions, rule_options).to_dict(),
        findings=findings,
        errors=[ErrorNote(n.source, n.message) for n in evidence.notes],
    )
