"""Human sections of a node result (every renderer shows them), built from its typed metrics only."""

from __future__ import annotations

from collections.abc import Mapping

from infradoctor.node.evidence import GpuDevice, GpuSnapshot, HostEvidence, KernelLogEvidence, WatchSummary
from infradoctor.node.gpu.base import active_reasons
from infradoctor.node.metrics import NodeHeadline, NodeMetrics
from infradoctor.report.sections import Cell, Section, Table
from infradoctor.result import Result
from infradoctor.xid import xid_info

GIB = 1024**3
MIB = 1024**2


def _gib(value: float | None) -> float | None:
    return None if value is None else round(value / GIB, 1)


def _mib(value: float | None) -> float | None:
    return None if value is None else round(value / MIB, 1)


def _pair(current: object, maximum: object, fmt: str = "{}") -> str:
    left = "–" if current is None else fmt.format(current)
    right = "–" if maximum is None else fmt.format(maximum)
    return f"{left}/{right}"


def _whole(value: float | None) -> int | None:
    return None if value is None else round(value)


def _round(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _flag(value: bool | None) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _gpu_row(d: GpuDevice) -> list[Cell]:
    lost = d.unavailable.get("device")
    if lost:
        return [d.index, f"not readable: {lost}", *([None] * 9)]
    reasons = [r.name.removesuffix("_slowdown").replace("_", " ")
               for r in active_reasons(d.clock_event_reasons) if r.name != "gpu_idle"]
    name = (d.name or "–").removeprefix("NVIDIA ")
    state = f"P{d.performance_state}" if d.performance_state is not None else ""
    return [
        d.index,
        name,
        _whole(d.utilization_gpu_pct),
        _pair(_gib(d.memory_used_bytes), _gib(d.memory_total_bytes), "{:.0f}"),
        _whole(d.temperature_c),
        _pair(_whole(d.power_draw_w), _whole(d.power_limit_w)),
        _pair(d.sm_clock_mhz, d.max_sm_clock_mhz),
        f"{_pair(d.pcie_gen_current, d.pcie_gen_max)} x{_pair(d.pcie_width_current, d.pcie_width_max)}",
        _pair(d.ecc.volatile_uncorrected, d.ecc.aggregate_uncorrected),
        _flag(d.remapped_rows_pending),
        " ".join(part for part in (state, ", ".join(reasons)) if part) or "–",
    ]


def gpu_section(gpu: GpuSnapshot) -> Section:
    """One row per GPU, then one per MIG device."""
    header = f"backend {gpu.backend} ({gpu.source})"
    if gpu.driver_version:
        header += f", driver {gpu.driver_version}"
    if gpu.cuda_version:
        header += f", CUDA {gpu.cuda_version}"
    if not gpu.devices:
        return Section("GPUs", lines=(header, "no GPU visible"))
    tables = [Table(
        columns=("gpu", "name", "util%", "mem GiB", "temp C", "power W", "SM MHz", "PCIe gen/width", "ECC unc",
                 "remap", "clocks"),
        rows=[_gpu_row(d) for d in gpu.devices],
    )]
    mig_rows: list[list[Cell]] = [
        [d.index, m.index, m.gpu_instance_id, m.compute_instance_id, m.multiprocessor_count,
         _pair(_gib(m.memory_used_bytes), _gib(m.memory_total_bytes), "{:.1f}"),
         sum(1 for p in d.processes if p.gpu_instance_id == m.gpu_instance_id)]
        for d in gpu.devices for m in d.mig_devices
    ]
    if mig_rows:
        tables.append(Table(columns=("gpu", "MIG device", "GI", "CI", "SMs", "mem GiB", "processes"), rows=mig_rows,
                            title="MIG devices"))
    windows: list[list[Cell]] = [
        [d.index, w.seconds, w.utilization_gpu_mean_pct,
         None if w.throttled_sample_share is None else round(100 * w.throttled_sample_share, 1),
         ", ".join(f"{k} {100 * v:.0f}%" for k, v in w.clock_event_share.items() if v > 0) or "–", w.pcie_replays]
        for d in gpu.devices if (w := d.window) is not None
    ]
    if windows:
        tables.append(Table(columns=("gpu", "window s", "util% mean", "throttled % of samples", "clocks held",
                                     "PCIe replays"), rows=windows, title="Over the watch"))
    return Section("GPUs", tables=tuple(tables), lines=(header,))


def host_section(host: HostEvidence, headline: NodeHeadline) -> Section:
    """CPU, memory, file descriptors and sockets as metric/value rows; disks and top processes as tables."""
    cpu, mem, fds, sockets = host.cpu, host.memory, host.fds, host.sockets
    rows: list[list[Cell]] = [
        ["CPU utilisation %", cpu.utilization_pct],
        ["CPU cores (usable/logical)", _pair(cpu.usable_cores, cpu.logical_cores)],
        ["load 1/5/15 min", "/".join(_round(v) for v in (cpu.load_1m, cpu.load_5m, cpu.load_15m))],
        ["iowait %", cpu.iowait_pct],
        ["memory used %", headline.memory_used_pct],
        ["memory available GiB", _gib(mem.available_bytes)],
        ["swap used GiB (of)", _pair(_gib(mem.swap_used_bytes), _gib(mem.swap_total_bytes))],
        ["fds open (this process / soft limit)", _pair(fds.process_open, fds.process_soft_limit)],
        ["file handles (system / max)", _pair(fds.system_allocated, fds.system_max)],
    ]
    if sockets is not None:
        rows.append(["TCP sockets by state",
                     ", ".join(f"{k} {v}" for k, v in sockets.tcp_by_state.items()) or "none"])
        rows.append(["ephemeral ports (in use / range)",
                     f"{sockets.ephemeral_ports_in_use} / {sockets.ephemeral_low}-{sockets.ephemeral_high}"])
    tables = [Table(columns=("host", "value"), rows=rows)]
    if host.disks:
        tables.append(Table(
            columns=("mount", "device", "fs", "used %", "free GiB", "size GiB", "in use as"),
            rows=[[d.mountpoint, d.device, d.fstype, round(100.0 * d.used_fraction, 1), _gib(d.free_bytes),
                   _gib(d.total_bytes), ", ".join(d.why)] for d in host.disks],
            title="disks in use",
        ))
    for procs, title in ((host.top_cpu, "top processes by CPU"), (host.top_rss, "top processes by memory")):
        if procs:
            tables.append(Table(
                columns=("pid", "name", "user", "CPU %", "RSS MiB", "threads"),
                rows=[[str(p.pid), p.name, p.username, p.cpu_pct, _mib(p.rss_bytes), p.threads] for p in procs],
                title=title,
            ))
    return Section("Host", tables=tuple(tables))


def kernel_section(kernel: KernelLogEvidence, by_code: Mapping[str, int]) -> Section:
    """Xid events by code, with meaning and action."""
    line = f"source: {kernel.source}, {kernel.lines_read} lines" if kernel.source else "no kernel log readable"
    if not by_code:
        return Section("Kernel log", lines=(line, "no Xid events"))
    rows: list[list[Cell]] = []
    for code, count in sorted(by_code.items(), key=lambda item: int(item[0]) if item[0].isdigit() else -1):
        info = xid_info(int(code)) if code.isdigit() else None
        rows.append([code, count, *((info.meaning, info.origin, info.action) if info else ("?", "?", "?"))])
    table = Table(columns=("Xid", "events", "meaning", "origin", "action"), rows=rows)
    return Section("Kernel log", tables=(table,), lines=(line,))


def _gpu_key(name: str) -> str | None:
    head = name.split("_", 1)[0]
    return head if head.startswith("gpu") and head[3:].isdigit() else None


def watch_section(watch: WatchSummary) -> Section:
    """Host metrics min/mean/p95/max over the watch, then one row per GPU."""
    metrics = watch.metrics
    host_rows: list[list[Cell]] = [[name, m.count, m.min, m.mean, m.p95, m.max]
                                   for name, m in metrics.items() if _gpu_key(name) is None]
    tables = [Table(columns=("metric", "samples", "min", "mean", "p95", "max"), rows=host_rows)]
    gpu_ids = sorted({key for name in metrics if (key := _gpu_key(name)) is not None}, key=lambda g: int(g[3:]))

    def stat(gpu: str, metric: str, key: str) -> float | None:
        summary = metrics.get(f"{gpu}_{metric}")
        return None if summary is None else float(getattr(summary, key))

    if gpu_ids:
        gpu_rows: list[list[Cell]] = []
        for gpu in gpu_ids:
            throttled = stat(gpu, "throttle", "mean")
            gpu_rows.append([
                int(gpu[3:]), stat(gpu, "util_pct", "mean"), stat(gpu, "util_pct", "p95"),
                stat(gpu, "mem_used_pct", "max"), stat(gpu, "temp_c", "max"), stat(gpu, "power_w", "mean"),
                stat(gpu, "sm_clock_mhz", "min"), None if throttled is None else round(100.0 * throttled, 1),
            ])
        tables.append(Table(
            columns=("gpu", "util% mean", "util% p95", "mem% max", "temp C max", "power W mean", "SM MHz min",
                     "throttled % of samples"),
            rows=gpu_rows,
            title="GPUs over the watch",
        ))
    line = (f"{watch.samples} samples every {watch.interval_s} s over {watch.elapsed_s} s"
            + (" (stopped early)" if watch.interrupted else ""))
    return Section("Watch", tables=tuple(tables), lines=(line,))


def sections(result: Result) -> list[Section]:
    """The node result's sections: GPUs, kernel log, host, watch."""
    metrics = NodeMetrics.from_dict(result.metrics)
    out = [gpu_section(metrics.gpu), kernel_section(metrics.kernel_log, metrics.xid_by_code)]
    if metrics.host is not None:
        out.append(host_section(metrics.host, metrics.headline))
    if metrics.watch is not None:
        out.append(watch_section(metrics.watch))
    return out
