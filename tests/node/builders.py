"""Evidence built by hand for rule tests: healthy defaults, override what the test is about."""

from __future__ import annotations

import dataclasses
from typing import Any

from infradoctor.node.evidence import (
    CpuEvidence,
    DiskUsage,
    EccCounts,
    FdEvidence,
    GpuDevice,
    GpuExpectation,
    GpuProcess,
    GpuSnapshot,
    HostEvidence,
    KernelLogEvidence,
    MemoryEvidence,
    NodeEvidence,
    SocketEvidence,
)

GIB = 1024**3


def gpu(index: int = 0, **over: Any) -> GpuDevice:
    base = GpuDevice(
        index=index, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{index}", pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
        utilization_gpu_pct=90.0, utilization_memory_pct=50.0, memory_used_bytes=40 * GIB,
        memory_total_bytes=80 * GIB, temperature_c=60.0, power_draw_w=500.0, power_limit_w=700.0,
        sm_clock_mhz=1980, max_sm_clock_mhz=1980, mem_clock_mhz=2619, max_mem_clock_mhz=2619,
        clock_event_reasons=0, ecc_enabled=True, ecc=EccCounts(0, 0, 0, 0), retired_pages_single_bit=None,
        retired_pages_double_bit=None, retired_pages_pending=None, remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0, remapped_rows_pending=False, remapped_rows_failure=False,
        pcie_gen_current=5, pcie_gen_max=5, pcie_width_current=16, pcie_width_max=16, pcie_replay_count=0,
        persistence_mode=True, mig_enabled=False, processes=(GpuProcess(1000 + index, "python", 39 * GIB),),
    )
    return dataclasses.replace(base, **over)


def host(**over: Any) -> HostEvidence:
    base = HostEvidence(
        hostname="node-1",
        cpu=CpuEvidence(logical_cores=8, usable_cores=8, utilization_pct=40.0, per_core_pct=(40.0,) * 8,
                        iowait_pct=0.5, load_1m=3.0, load_5m=3.0, load_15m=3.0, window_s=0.5),
        memory=MemoryEvidence(total_bytes=64 * GIB, available_bytes=40 * GIB, used_bytes=24 * GIB,
                              swap_total_bytes=8 * GIB, swap_used_bytes=0),
        disks=(DiskUsage("/", "/dev/nvme0n1p1", "ext4", 500 * GIB, 200 * GIB, 300 * GIB, 1000, 900, ("root",)),),
        fds=FdEvidence(process_open=20, process_soft_limit=1024, process_hard_limit=4096, system_allocated=2000,
                       system_max=1_000_000),
        sockets=SocketEvidence({"ESTABLISHED": 40, "LISTEN": 5, "TIME_WAIT": 100}, 32768, 60999, 120),
        top_cpu=(),
        top_rss=(),
    )
    return dataclasses.replace(base, **over)


def evidence(*devices: GpuDevice, **over: Any) -> NodeEvidence:
    base = NodeEvidence(
        host=host(),
        gpu=GpuSnapshot("nvml", "test", "550.90.07", "12.4", tuple(devices), True),
        kernel=KernelLogEvidence(source="test.log", lines_read=0, xid_events=()),
        expectation=GpuExpectation(cuda_visible_devices=None, device_nodes=(), driver_loaded=False,
                                   driver_version_file=None),
    )
    return dataclasses.replace(base, **over)
