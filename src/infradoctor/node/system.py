"""The host probe (psutil and /proc).

CPU and load, memory and swap, disks in use, file descriptors, TCP sockets and the ephemeral port range, and the
busiest processes.

Each part is read on its own; a part that cannot be read becomes a note (and ``None`` or an empty value), never an
exception. The CPU numbers come from one measurement window (:data:`DEFAULT_WINDOW_S`), the same window for the
whole machine, each core and each process.
"""

from __future__ import annotations

import contextlib
import os
import platform
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil

from infradoctor.node.evidence import (
    CpuEvidence,
    DiskUsage,
    FdEvidence,
    HostEvidence,
    MemoryEvidence,
    Note,
    ProcessSample,
    SocketEvidence,
)

DEFAULT_WINDOW_S = 0.5
"""CPU measurement window of a snapshot."""
TOP_PROCESSES = 5
"""Processes listed by CPU and by RSS."""
MAX_DISKS = 32
"""Mounts reported at most."""
DISK_TIMEOUT_S = 2.0
"""Longest wait for one mount's usage (a hung NFS server must not hang the snapshot)."""
PATH_ENV_VARS = ("HF_HOME", "HF_DATASETS_CACHE", "TRANSFORMERS_CACHE", "TORCH_HOME", "XDG_CACHE_HOME", "TMPDIR",
                 "INFRADOCTOR_HOME")
"""Environment variables naming directories whose filesystems count as in use."""
_PSEUDO_FS = frozenset({"squashfs", "iso9660", "tmpfs", "devtmpfs", "proc", "sysfs", "cgroup", "cgroup2", "nsfs",
                        "autofs", "tracefs", "debugfs", "securityfs", "pstore", "bpf", "configfs", "fusectl",
                        "mqueue", "hugetlbfs", "devpts", "ramfs", "efivarfs", "binfmt_misc", "rpc_pipefs"})


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int | None, int | None]:
    """(low, high) of the ephemeral port range, or (None, None) off Linux."""
    try:
        low, high = (int(x) for x in Path(path).read_text(encoding="ascii").split()[:2])
    except (OSError, ValueError):
        return None, None
    return low, high


def probe_cpu_window(
    window_s: float, sleep: Callable[[float], None]
) -> tuple[CpuEvidence, list[tuple[psutil.Process, float]]]:
    """CPU over one window, and each process's CPU over the same window."""
    processes: list[psutil.Process] = []
    for proc in psutil.process_iter():
        try:
            proc.cpu_percent(None)
            processes.append(proc)
        except (psutil.Error, OSError):
            continue
    before = psutil.cpu_times(percpu=True)
    total_before = psutil.cpu_times()
    sleep(window_s)
    after = psutil.cpu_times(percpu=True)
    total_after = psutil.cpu_times()
    per_core = tuple(_busy_pct(b, a) for b, a in zip(before, after, strict=False))
    utilization = _busy_pct(total_before, total_after)
    iowait = _share_pct(total_before, total_after, "iowait")
    proc_cpu: list[tuple[psutil.Process, float]] = []
    for proc in processes:
        try:
            proc_cpu.append((proc, float(proc.cpu_percent(None))))
        except (psutil.Error, OSError):
            continue
    try:
        load: tuple[float, float, float] | None = os.getloadavg()
    except (OSError, AttributeError):
        load = None
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = psutil.cpu_count() or 1
    cpu = CpuEvidence(
        logical_cores=psutil.cpu_count() or 1,
        usable_cores=usable,
        utilization_pct=utilization,
        per_core_pct=per_core,
        iowait_pct=iowait,
        load_1m=load[0] if load else None,
        load_5m=load[1] if load else None,
        load_15m=load[2] if load else None,
        window_s=window_s,
    )
    return cpu, proc_cpu


def _total(times: Any) -> float:
    # guest time is already counted in user time on Linux
    return float(sum(times)) - float(getattr(times, "guest", 0.0)) - float(getattr(times, "guest_nice", 0.0))


def _busy_pct(before: Any, after: Any) -> float:
    total = _total(after) - _total(before)
    if total <= 0:
        return 0.0
    idle = float(after.idle - before.idle) + float(getattr(after, "iowait", 0.0) - getattr(before, "iowait", 0.0))
    return round(max(0.0, min(100.0, 100.0 * (1.0 - idle / total))), 2)


def _share_pct(before: Any, after: Any, field: str) -> float | None:
    if not hasattr(after, field):
        return None
    total = _total(after) - _total(before)
    if total <= 0:
        return 0.0
    return round(100.0 * float(getattr(after, field) - getattr(before, field)) / total, 2)


def probe_memory() -> MemoryEvidence:
    """RAM and swap (``free -b``)."""
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return MemoryEvidence(
        total_bytes=int(vm.total),
        available_bytes=int(vm.available),
        used_bytes=int(vm.total - vm.available),
        swap_total_bytes=int(swap.total),
        swap_used_bytes=int(swap.used),
        swap_in_bytes=int(swap.sin),
        swap_out_bytes=int(swap.sout),
    )


def _mount_of(path: str) -> str | None:
    try:
        current = os.path.realpath(path)
    except OSError:
        return None
    if not os.path.exists(current):
        return None
    for _ in range(64):  # bounded walk up to the mount point
        if os.path.ismount(current):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return current
        current = parent
    return None


def paths_in_use() -> dict[str, str]:
    """Directories whose filesystems this machine's work uses: reason -> path."""
    out = {"root": "/", "tmp": tempfile.gettempdir()}
    with contextlib.suppress(OSError):
        out["cwd"] = os.getcwd()
    home = os.environ.get("HOME")
    if home:
        out["home"] = home
    for var in PATH_ENV_VARS:
        value = os.environ.get(var)
        if value:
            out[var] = value
    return out


def _usage_with_timeout(mountpoint: str, timeout_s: float) -> tuple[Any, os.statvfs_result] | None:
    """``disk_usage`` and ``statvfs`` of a mount, or None when it does not answer in time.

    A stale network mount blocks ``statvfs`` forever; the daemon thread is abandoned rather than hanging the
    whole snapshot.
    """
    box: list[tuple[Any, os.statvfs_result] | BaseException] = []

    def read() -> None:
        try:
            box.append((psutil.disk_usage(mountpoint), os.statvfs(mountpoint)))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box.append(exc)

    thread = threading.Thread(target=read, name=f"statvfs {mountpoint}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not box:
        return None
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]


def probe_disks(
    extra_paths: Iterable[str] = (), *, notes: list[Note] | None = None, timeout_s: float = DISK_TIMEOUT_S
) -> list[DiskUsage]:
    """Usage of mounted block-device filesystems plus the filesystems of the paths in use (``df``).

    Mounts that do not answer within ``timeout_s`` are skipped with a note in ``notes``.
    """
    partitions = {p.mountpoint: p for p in psutil.disk_partitions(all=True)}
    reasons: dict[str, list[str]] = {}
    for part in psutil.disk_partitions(all=False):
        if part.fstype in _PSEUDO_FS or part.mountpoint.startswith("/snap/") or not os.path.isdir(part.mountpoint):
            continue
        reasons.setdefault(part.mountpoint, []).append("mounted")
    for why, path in [*paths_in_use().items(), *(("path", p) for p in extra_paths)]:
        mount = _mount_of(path)
        if mount is not None:
            reasons.setdefault(mount, []).append(why)
    disks: list[DiskUsage] = []
    for mountpoint, whys in list(reasons.items())[:MAX_DISKS]:
        try:
            answered = _usage_with_timeout(mountpoint, timeout_s)
        except OSError:
            continue
        if answered is None:
            if notes is not None:
                notes.append(Note("host.disks", f"{mountpoint} did not answer in {timeout_s:g} s (stale mount?)"))
            continue
        usage, stat = answered
        known = partitions.get(mountpoint)
        disks.append(
            DiskUsage(
                mountpoint=mountpoint,
                device=known.device if known else "",
                fstype=known.fstype if known else "",
                total_bytes=int(usage.total),
                used_bytes=int(usage.used),
                free_bytes=int(usage.free),
                inodes_total=int(stat.f_files) or None,
                inodes_free=int(stat.f_ffree) if stat.f_files else None,
                why=tuple(dict.fromkeys(w for w in whys if w != "mounted" or len(whys) == 1)),
            )
        )
    return disks


def probe_fds() -> FdEvidence:
    """Open file descriptors of this process and system-wide, against their limits."""
    try:
        process_open: int | None = psutil.Process().num_fds()
    except (psutil.Error, OSError, AttributeError):
        process_open = None
    soft: int | None = None
    hard: int | None = None
    try:
        import resource

        soft_raw, hard_raw = resource.getrlimit(resource.RLIMIT_NOFILE)
        soft = None if soft_raw == resource.RLIM_INFINITY else int(soft_raw)
        hard = None if hard_raw == resource.RLIM_INFINITY else int(hard_raw)
    except (ImportError, OSError, ValueError):
        pass
    return FdEvidence(
        process_open=process_open,
        process_soft_limit=soft,
        process_hard_limit=hard,
        system_allocated=_read_int("/proc/sys/fs/file-nr"),
        system_max=_read_int("/proc/sys/fs/file-max"),
    )


def probe_sockets() -> SocketEvidence:
    """TCP sockets by state (``ss -tan``) and local ports in the ephemeral range."""
    low, high = read_ephemeral_range()
    states: Counter[str] = Counter()
    ephemeral: set[int] = set()
    for conn in psutil.net_connections(kind="tcp"):
        status = str(conn.status)
        states[status] += 1
        port = conn.laddr.port if conn.laddr else None
        if (
            status != psutil.CONN_LISTEN
            and port is not None
            and low is not None
            and high is not None
            and low <= port <= high
        ):
            ephemeral.add(port)
    return SocketEvidence(
        tcp_by_state=dict(sorted(states.items())),
        ephemeral_low=low,
        ephemeral_high=high,
        ephemeral_ports_in_use=len(ephemeral),
    )


def _process_sample(proc: psutil.Process, cpu: float) -> ProcessSample | None:
    try:
        with proc.oneshot():
            name = proc.name()
            rss = int(proc.memory_info().rss)
            threads = proc.num_threads()
            try:
                user: str | None = proc.username()
            except (psutil.Error, KeyError, OSError):
                user = None
    except (psutil.Error, OSError):
        return None
    return ProcessSample(pid=proc.pid, name=name, username=user, cpu_pct=round(cpu, 1), rss_bytes=rss,
                         threads=threads)


def top_processes(
    proc_cpu: list[tuple[psutil.Process, float]], limit: int = TOP_PROCESSES
) -> tuple[tuple[ProcessSample, ...], tuple[ProcessSample, ...]]:
    """(busiest by CPU, largest by RSS)."""
    by_cpu = sorted(proc_cpu, key=lambda item: -item[1])
    top_cpu = [s for s in (_process_sample(p, c) for p, c in by_cpu[: limit * 2] if c > 0) if s][:limit]
    rss: list[tuple[int, psutil.Process, float]] = []
    for proc, cpu in proc_cpu:
        try:
            rss.append((int(proc.memory_info().rss), proc, cpu))
        except (psutil.Error, OSError):
            continue
    rss.sort(key=lambda item: -item[0])
    top_rss = [s for s in (_process_sample(p, c) for _, p, c in rss[: limit * 2]) if s][:limit]
    return tuple(top_cpu), tuple(top_rss)


def probe_host(
    *, window_s: float = DEFAULT_WINDOW_S, sleep: Callable[[float], None] = time.sleep
) -> tuple[HostEvidence, tuple[Note, ...]]:
    """Everything about the host, and notes about what could not be read."""
    notes: list[Note] = []
    cpu, proc_cpu = probe_cpu_window(window_s, sleep)
    memory = probe_memory()
    try:
        disks = tuple(probe_disks(notes=notes))
    except (OSError, psutil.Error) as exc:
        disks = ()
        notes.append(Note("host.disks", f"cannot list mounts: {exc}"))
    fds = probe_fds()
    if fds.system_max is None:
        notes.append(Note("host.fds", "system-wide file handles not readable (/proc/sys/fs/file-nr)"))
    try:
        sockets: SocketEvidence | None = probe_sockets()
    except (psutil.Error, OSError) as exc:
        sockets = None
        notes.append(Note("host.sockets", f"TCP sockets not readable: {exc}"))
    top_cpu, top_rss = top_processes(proc_cpu)
    try:
        uptime: float | None = max(0.0, time.time() - psutil.boot_time())
    except (psutil.Error, OSError):
        uptime = None
    host = HostEvidence(
        hostname=platform.node(),
        cpu=cpu,
        memory=memory,
        disks=disks,
        fds=fds,
        sockets=sockets,
        top_cpu=top_cpu,
        top_rss=top_rss,
        uptime_s=uptime,
    )
    return host, tuple(notes)
