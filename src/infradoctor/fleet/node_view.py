"""Each node's fleet evidence as the evidence ``infradoctor node`` gathers, so the same rules judge it.

One :class:`~infradoctor.node.evidence.NodeEvidence` per node, built from the window's summaries: capacities that
run out (GPU and host memory, disks, file handles, sockets) at their worst in the window; rates and loads (CPU,
GPU utilisation, power) as window means, with a watch summary the rules read as they read ``node --watch``; the
throttle reasons at the end of the window plus the share of the window spent throttled; the Xid value
dcgm-exporter last reported (``DCGM_FI_DEV_XID_ERRORS`` holds the last Xid, not a count: one event per GPU).
A field the exporter did not export stays ``None`` and is listed in ``GpuDevice.unavailable``: not collected,
not healthy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from infradoctor.findings import Finding, Location, run_rules
from infradoctor.fleet.evidence import FleetGpu, FleetHost, Stat
from infradoctor.node.evidence import (
    CpuEvidence,
    DiskUsage,
    EccCounts,
    FdEvidence,
    GpuDevice,
    GpuExpectation,
    GpuSnapshot,
    GpuWindow,
    HostEvidence,
    KernelLogEvidence,
    MemoryEvidence,
    MetricSummary,
    NodeEvidence,
    SocketEvidence,
    WatchSummary,
    XidEvent,
)
from infradoctor.node.rules._common import NodeOptions

MIB = 1024 * 1024
XID_SOURCE = "dcgm-exporter DCGM_FI_DEV_XID_ERRORS"
"""How fleet Xid findings name where the Xid came from."""

_COLLECTED = {
    "ecc": ("ecc_dbe_volatile", "ecc_sbe_volatile", "ecc_dbe_aggregate", "ecc_sbe_aggregate"),
    "retired_pages": ("retired_sbe", "retired_dbe", "retired_pending"),
    "remapped_rows": ("remapped_uncorrectable", "remapped_correctable", "remap_failure", "remap_pending"),
    "clock_event_reasons": ("clock_reasons",),
    "pcie_replays": ("pcie_replays",),
    "xid": ("xid",),
}
"""Evidence groups and the signals that carry them, to say which were not collected."""


def _value(stats: dict[str, Stat], name: str, kind: str = "last") -> float | None:
    stat = stats.get(name)
    return getattr(stat, kind) if stat is not None else None


def _int(value: float | None) -> int | None:
    return None if value is None else int(round(value))


def _flag(value: float | None) -> bool | None:
    return None if value is None else value > 0


def gpu_index(gpu: FleetGpu, position: int) -> int:
    """The GPU's index (dcgm-exporter's ``gpu`` label), or its position when the label is not a number."""
    return int(gpu.gpu) if gpu.gpu.isdigit() and len(gpu.gpu) < 6 else position


def gpu_device(gpu: FleetGpu, position: int, *, window_s: float | None = None, steps: int = 0) -> GpuDevice:
    """A GPU as the node rules read it; with ``window_s``, how it moved over the queried window too."""
    s = dict(gpu.signals)
    used = _value(s, "fb_used_mib", "max")
    free_last, used_last = _value(s, "fb_free_mib"), _value(s, "fb_used_mib")
    total = None
    if free_last is not None and used_last is not None:
        total = used_last + free_last + (_value(s, "fb_reserved_mib") or 0.0)
    unavailable = {group: "not collected by dcgm-exporter (absent from its counters)"
                   for group, names in _COLLECTED.items() if not any(n in s for n in names)}
    unavailable.update({group: "unknown: the query failed" for group, names in _COLLECTED.items()
                        if any(n in gpu.unknown for n in names)})
    return GpuDevice(
        index=gpu_index(gpu, position), name=gpu.model, uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id,
        utilization_gpu_pct=_value(s, "util_pct", "mean"),
        utilization_memory_pct=_value(s, "mem_copy_util_pct", "mean"),
        memory_used_bytes=_int(used * MIB) if used is not None else None,
        memory_total_bytes=_int(total * MIB) if total else None,
        temperature_c=_value(s, "temp_c", "max"), power_draw_w=_value(s, "power_w", "mean"),
        power_limit_w=_value(s, "power_limit_w"), sm_clock_mhz=_int(_value(s, "sm_clock_mhz")),
        max_sm_clock_mhz=_int(_value(s, "max_sm_clock_mhz")), mem_clock_mhz=None, max_mem_clock_mhz=None,
        clock_event_reasons=_int(_value(s, "clock_reasons")), ecc_enabled=None,
        ecc=EccCounts(_int(_value(s, "ecc_sbe_volatile")), _int(_value(s, "ecc_dbe_volatile")),
                      _int(_value(s, "ecc_sbe_aggregate")), _int(_value(s, "ecc_dbe_aggregate"))),
        retired_pages_single_bit=_int(_value(s, "retired_sbe")),
        retired_pages_double_bit=_int(_value(s, "retired_dbe")),
        retired_pages_pending=_flag(_value(s, "retired_pending")),
        remapped_rows_correctable=_int(_value(s, "remapped_correctable")),
        remapped_rows_uncorrectable=_int(_value(s, "remapped_uncorrectable")),
        remapped_rows_pending=_flag(_value(s, "remap_pending")),
        remapped_rows_failure=_flag(_value(s, "remap_failure")),
        pcie_gen_current=None, pcie_gen_max=None, pcie_width_current=None, pcie_width_max=None,
        pcie_replay_count=_int(_value(s, "pcie_replays")), persistence_mode=None, mig_enabled=None,
        unavailable=unavailable,
        window=_window(gpu, s, window_s, steps) if window_s else None,
    )


def _window(gpu: FleetGpu, s: Mapping[str, Stat], window_s: float, steps: int) -> GpuWindow:
    """The window the node rules judge (N003: share of samples throttled; N010: replay counter growth)."""
    replays = s.get("pcie_replays")
    growth = None
    if replays is not None and replays.max is not None and replays.min is not None:
        growth = _int(max(0.0, replays.max - replays.min))
    return GpuWindow(seconds=window_s, samples=steps, utilization_gpu_mean_pct=_value(dict(s), "util_pct", "mean"),
                     utilization_gpu_max_pct=_value(dict(s), "util_pct", "max"),
                     throttled_sample_share=gpu.throttled_share, clock_event_share=dict(gpu.reason_share),
                     pcie_replays=growth)


def _summary(stat: Stat | None, count: int) -> MetricSummary | None:
    if stat is None or stat.mean is None or count <= 0:
        return None
    low = stat.min if stat.min is not None else stat.mean
    high = stat.max if stat.max is not None else stat.mean
    # p95 is not queried: the maximum bounds it from above, and no rule reads it.
    return MetricSummary(count=count, min=low, mean=stat.mean, p95=high, max=high)


def _share_summary(share: float, count: int) -> MetricSummary:
    """A 0/1 series' summary from its mean: for binary samples min, p95 (nearest rank) and max follow exactly."""
    return MetricSummary(count=count, min=1.0 if share >= 1.0 else 0.0, mean=share,
                         p95=1.0 if share > 0.05 else 0.0, max=1.0 if share > 0 else 0.0)


def memory(host: FleetHost) -> tuple[float, float]:
    """RAM total and the least available in the window, in bytes ((0, 0) when unknown)."""
    s = dict(host.signals)
    if "mem_available_bytes" in host.unknown or "mem_total_bytes" in host.unknown:
        return 0.0, 0.0  # unknown: the rules skip a host without a memory total
    total = _value(s, "mem_total_bytes") or 0.0
    available = _value(s, "mem_available_bytes", "min")
    if available is None:  # kernels before 3.14 have no MemAvailable: free + cache + buffers is the old estimate
        parts = [_value(s, n, "min") for n in ("mem_free_bytes", "mem_cached_bytes", "mem_buffers_bytes")]
        available = sum(p for p in parts if p is not None) if parts[0] is not None else total
    return total, available


def host_evidence(host: FleetHost, window_s: float) -> HostEvidence:
    """A node's host evidence as the node rules read it."""
    s = dict(host.signals)
    cores = _int(_value(s, "cpu_cores")) or 0
    total, available = memory(host)
    swap_total = _value(s, "swap_total_bytes") or 0.0
    swap_free = _value(s, "swap_free_bytes", "min")
    swap_used = max(0.0, swap_total - swap_free) if swap_free is not None else 0.0
    tw = _value(s, "tcp_time_wait", "max")
    disks = tuple(
        DiskUsage(mountpoint=d.mountpoint, device=d.device, fstype=d.fstype, total_bytes=int(d.size_bytes),
                  used_bytes=int(max(0.0, d.size_bytes - d.free_bytes_min)), free_bytes=int(d.avail_bytes_min),
                  inodes_total=_int(d.files), inodes_free=_int(d.files_free), why=("node_exporter",))
        for d in host.disks
    )
    return HostEvidence(
        hostname=host.node,
        cpu=CpuEvidence(logical_cores=cores, usable_cores=cores, utilization_pct=_value(s, "cpu_util_pct", "mean"),
                        per_core_pct=(), iowait_pct=_value(s, "cpu_iowait_pct", "mean"),
                        load_1m=_value(s, "load1", "mean"), load_5m=_value(s, "load5"),
                        load_15m=_value(s, "load15"), window_s=window_s),
        memory=MemoryEvidence(total_bytes=int(total), available_bytes=int(min(available, total) if total else 0),
                              used_bytes=int(max(0.0, total - available)), swap_total_bytes=int(swap_total),
                              swap_used_bytes=int(swap_used)),
        disks=disks,
        fds=FdEvidence(process_open=None, process_soft_limit=None, process_hard_limit=None,
                       system_allocated=_int(_value(s, "fds_allocated", "max")),
                       system_max=_int(_value(s, "fds_maximum"))),
        sockets=SocketEvidence({"TIME_WAIT": int(tw)}, None, None, 0) if tw is not None else None,
        top_cpu=(), top_rss=(),
    )


def node_evidence(node: str, gpus: list[FleetGpu], host: FleetHost | None, *, window_s: float, steps: int,
                  source: str) -> NodeEvidence:
    """One node's evidence."""
    devices = [gpu_device(g, i, window_s=window_s, steps=steps) for i, g in enumerate(gpus)]
    xids = []
    watch: dict[str, MetricSummary] = {}
    for gpu, device in zip(gpus, devices, strict=True):
        last_xid = _value(dict(gpu.signals), "xid")
        if last_xid is not None and last_xid > 0:
            first = _value(dict(gpu.signals), "xid", "min")
            when = "reported all window" if first is not None and first == last_xid else "new in the window"
            xids.append(XidEvent(code=int(last_xid), pci=device.pci_bus_id or device.label, line=0,
                                 message=f"last Xid reported by dcgm-exporter on {node} {device.label} ({when})",
                                 timestamp=None, pid=None, process_name=None))
        if gpu.throttled_share is not None:
            watch[f"gpu{device.index}_throttle"] = _share_summary(gpu.throttled_share, steps)
        for name, key in (("sm_clock_mhz", "sm_clock_mhz"), ("temp_c", "temp_c"), ("util_pct", "util_pct")):
            summary = _summary(gpu.signals.get(key), steps)
            if summary is not None:
                watch[f"gpu{device.index}_{name}"] = summary
    host_ev = host_evidence(host, window_s) if host is not None else None
    if host is not None:
        cpu = _summary(host.signals.get("cpu_util_pct"), steps)
        if cpu is not None:
            watch["cpu_util_pct"] = cpu
    snapshot = GpuSnapshot(backend="dcgm-exporter" if devices else "none",
                           source=source if devices else "no dcgm-exporter series for this node",
                           driver_version=None, cuda_version=None, devices=tuple(devices), available=bool(devices))
    return NodeEvidence(
        host=host_ev, gpu=snapshot,
        kernel=KernelLogEvidence(source=XID_SOURCE if xids else None, lines_read=0, xid_events=tuple(xids),
                                 xid_events_total=len(xids)),
        expectation=GpuExpectation(cuda_visible_devices=None, device_nodes=(), driver_loaded=False,
                                   driver_version_file=None),
        watch=WatchSummary(samples=steps, interval_s=window_s / max(1, steps), elapsed_s=window_s,
                           interrupted=False, metrics=watch),
    )


def node_findings(node: str, evidence: NodeEvidence, options: NodeOptions) -> list[Finding]:
    """The node rules over one node's evidence, each finding naming the node (and GPU) it is about.

    Their ``source`` is ``prometheus``: the evidence was read from it.
    """
    out = []
    for finding in run_rules(evidence, options):
        where = finding.location.file if finding.location is not None else ""
        if finding.code == "N001":  # its location is the kernel log: name the GPUs instead
            where = ", ".join(str(g) for g in finding.evidence.get("gpus") or finding.evidence.get("pci") or ())
        location = Location(file=f"{node} {where}".strip())
        title = finding.title
        if finding.code == "N001":  # dcgm-exporter's Xid events carry the GPU's name where the kernel prints PCI
            title = title.replace("PCI:GPU ", "GPU ")
        out.append(replace(finding, title=f"{node}: {title}", location=location,  # read from Prometheus
                           evidence={"node": node, **finding.evidence, "source": "prometheus"}))
    return out
