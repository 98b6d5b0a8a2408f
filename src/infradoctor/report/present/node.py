"""Human sections of a node result (every renderer shows them), built from ``result.metrics`` only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from infradoctor.report.sections import Cell, Section, Table
from infradoctor.result import Result
from infradoctor.xid import xid_info

GIB = 1024**3


def _gib(value: Any) -> float | None:
    return round(value / GIB, 1) if isinstance(value, (int, float)) else None


def _pair(current: Any, maximum: Any, fmt: str = "{}") -> str:
    left = "–" if current is None else fmt.format(current)
    right = "–" if maximum is None else fmt.format(maximum)
    return f"{left}/{right}"


def _whole(value: Any) -> int | None:
    return round(value) if isinstance(value, (int, float)) else None


def _round(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "–"


def _flag(value: Any) -> str:
    return "–" if value is None else ("yes" if value else "no")


def gpu_section(gpu: Mapping[str, Any]) -> Section:
    """One row per GPU."""
    devices: Sequence[Mapping[str, Any]] = gpu.get("devices") or []
    header = f"backend {gpu.get('backend')} ({gpu.get('source')})"
    if gpu.get("driver_version"):
        header += f", driver {gpu.get('driver_version')}"
    if gpu.get("cuda_version"):
        header += f", CUDA {gpu.get('cuda_version')}"
    if not devices:
        return Section("GPUs", lines=(header, "no GPU visible"))
    rows: list[list[Cell]] = []
    for d in devices:
        ecc = d.get("ecc") or {}
        lost = (d.get("unavailable") or {}).get("device")
        if lost:
            rows.append([d.get("index"), f"not readable: {lost}", *([None] * 9)])
            continue
        reasons = [
            r.removesuffix("_slowdown").replace("_", " ")
            for r in d.get("clock_event_reason_names") or ()
            if r != "gpu_idle"
        ]
        name = str(d.get("name") or "–").removeprefix("NVIDIA ")
        rows.append(
            [
                d.get("index"),
                name,
                _whole(d.get("utilization_gpu_pct")),
                _pair(_gib(d.get("memory_used_bytes")), _gib(d.get("memory_total_bytes")), "{:.0f}"),
                _whole(d.get("temperature_c")),
                _pair(d.get("power_draw_w"), d.get("power_limit_w"), "{:.0f}"),
                _pair(d.get("sm_clock_mhz"), d.get("max_sm_clock_mhz")),
                f"{_pair(d.get('pcie_gen_current'), d.get('pcie_gen_max'))} "
                f"x{_pair(d.get('pcie_width_current'), d.get('pcie_width_max'))}",
                _pair(ecc.get("volatile_uncorrected"), ecc.get("aggregate_uncorrected")),
                _flag(d.get("remapped_rows_pending")),
                ", ".join(reasons) or "–",
            ]
        )
    table = Table(
        columns=("gpu", "name", "util%", "mem GiB", "temp C", "power W", "SM MHz", "PCIe gen/width", "ECC unc",
                 "remap", "clocks"),
        rows=rows,
    )
    return Section("GPUs", tables=(table,), lines=(header,))


def host_section(host: Mapping[str, Any], headline: Mapping[str, Any]) -> Section:
    """CPU, memory, file descriptors and sockets as metric/value rows; disks and top processes as tables."""
    cpu = host.get("cpu") or {}
    mem = host.get("memory") or {}
    fds = host.get("fds") or {}
    sockets = host.get("sockets") or {}
    rows: list[list[Cell]] = [
        ["CPU utilisation %", cpu.get("utilization_pct")],
        ["CPU cores (usable/logical)", _pair(cpu.get("usable_cores"), cpu.get("logical_cores"))],
        ["load 1/5/15 min", "/".join(_round(cpu.get(k)) for k in ("load_1m", "load_5m", "load_15m"))],
        ["iowait %", cpu.get("iowait_pct")],
        ["memory used %", headline.get("memory_used_pct")],
        ["memory available GiB", _gib(mem.get("available_bytes"))],
        ["swap used GiB (of)", _pair(_gib(mem.get("swap_used_bytes")), _gib(mem.get("swap_total_bytes")))],
        ["fds open (this process / soft limit)", _pair(fds.get("process_open"), fds.get("process_soft_limit"))],
        ["file handles (system / max)", _pair(fds.get("system_allocated"), fds.get("system_max"))],
    ]
    if sockets:
        states = sockets.get("tcp_by_state") or {}
        rows.append(["TCP sockets by state", ", ".join(f"{k} {v}" for k, v in states.items()) or "none"])
        rows.append(
            [
                "ephemeral ports (in use / range)",
                f"{sockets.get('ephemeral_ports_in_use')} / {sockets.get('ephemeral_low')}-"
                f"{sockets.get('ephemeral_high')}",
            ]
        )
    tables = [Table(columns=("host", "value"), rows=rows)]
    disks = host.get("disks") or []
    if disks:
        tables.append(
            Table(
                columns=("mount", "device", "fs", "used %", "free GiB", "size GiB", "in use as"),
                rows=[
                    [
                        d.get("mountpoint"),
                        d.get("device"),
                        d.get("fstype"),
                        round(100.0 * d["used_bytes"] / max(1, d["used_bytes"] + d["free_bytes"]), 1),
                        _gib(d.get("free_bytes")),
                        _gib(d.get("total_bytes")),
                        ", ".join(d.get("why") or ()),
                    ]
                    for d in disks
                ],
                title="disks in use",
            )
        )
    for key, title in (("top_cpu", "top processes by CPU"), ("top_rss", "top processes by memory")):
        procs = host.get(key) or []
        if procs:
            tables.append(
                Table(
                    columns=("pid", "name", "user", "CPU %", "RSS MiB", "threads"),
                    rows=[
                        [str(p.get("pid")), p.get("name"), p.get("username"), p.get("cpu_pct"),
                         _mib(p.get("rss_bytes")), p.get("threads")]
                        for p in procs
                    ],
                    title=title,
                )
            )
    return Section("Host", tables=tuple(tables))


def _mib(value: Any) -> float | None:
    return round(value / 2**20, 1) if isinstance(value, (int, float)) else None


def kernel_section(kernel: Mapping[str, Any]) -> Section:
    """Xid events by code, with meaning and action."""
    source = kernel.get("source")
    line = f"source: {source}, {kernel.get('lines_read', 0)} lines" if source else "no kernel log readable"
    by_code: Mapping[str, int] = kernel.get("xid_by_code") or {}
    if not by_code:
        return Section("Kernel log", lines=(line, "no Xid events"))
    rows: list[list[Cell]] = []
    for code, count in sorted(by_code.items(), key=lambda item: int(item[0])):
        info = xid_info(int(code))
        rows.append([int(code), count, info.meaning, info.origin, info.action])
    table = Table(columns=("Xid", "events", "meaning", "origin", "action"), rows=rows)
    return Section("Kernel log", tables=(table,), lines=(line,))


def watch_section(watch: Mapping[str, Any]) -> Section:
    """Host metrics min/mean/p95/max over the watch, then one row per GPU."""
    metrics: Mapping[str, Mapping[str, Any]] = watch.get("metrics") or {}
    host_rows: list[list[Cell]] = [
        [name, m.get("count"), m.get("min"), m.get("mean"), m.get("p95"), m.get("max")]
        for name, m in metrics.items()
        if not name.startswith("gpu")
    ]
    tables = [Table(columns=("metric", "samples", "min", "mean", "p95", "max"), rows=host_rows)]
    gpu_ids = sorted({name.split("_", 1)[0] for name in metrics if name.startswith("gpu")}, key=lambda g: int(g[3:]))

    def stat(gpu: str, metric: str, key: str) -> Cell:
        value = (metrics.get(f"{gpu}_{metric}") or {}).get(key)
        return value if isinstance(value, (int, float)) else None

    if gpu_ids:
        gpu_rows: list[list[Cell]] = []
        for gpu in gpu_ids:
            throttled = stat(gpu, "throttle", "mean")
            gpu_rows.append([
                int(gpu[3:]), stat(gpu, "util_pct", "mean"), stat(gpu, "util_pct", "p95"),
                stat(gpu, "mem_used_pct", "max"), stat(gpu, "temp_c", "max"), stat(gpu, "power_w", "mean"),
                stat(gpu, "sm_clock_mhz", "min"),
                round(100.0 * throttled, 1) if isinstance(throttled, (int, float)) else None,
            ])
        tables.append(Table(
            columns=("gpu", "util% mean", "util% p95", "mem% max", "temp C max", "power W mean", "SM MHz min",
                     "throttled % of samples"),
            rows=gpu_rows,
            title="GPUs over the watch",
        ))
    line = (
        f"{watch.get('samples')} samples every {watch.get('interval_s')} s over {watch.get('elapsed_s')} s"
        + (" (stopped early)" if watch.get("interrupted") else "")
    )
    return Section("Watch", tables=tuple(tables), lines=(line,))


def sections(result: Result) -> list[Section]:
    """The node result's sections: GPUs, kernel log, host, watch."""
    metrics = result.metrics
    out: list[Section] = []
    gpu = metrics.get("gpu")
    if isinstance(gpu, Mapping):
        out.append(gpu_section(gpu))
    kernel = metrics.get("kernel_log")
    if isinstance(kernel, Mapping):
        out.append(kernel_section(kernel))
    host = metrics.get("host")
    if isinstance(host, Mapping):
        out.append(host_section(host, metrics.get("headline") or {}))
    watch = metrics.get("watch")
    if isinstance(watch, Mapping):
        out.append(watch_section(watch))
    return out
