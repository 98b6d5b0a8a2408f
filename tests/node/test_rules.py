"""Each node rule on evidence built by hand: it fires on the bad case, stays quiet on the good one, and at its edges."""

from __future__ import annotations

import dataclasses

import pytest

from infradoctor.findings import Severity, catalog, run_rules
from infradoctor.node.evidence import (
    DiskUsage,
    EccCounts,
    FdEvidence,
    GpuExpectation,
    GpuProcess,
    GpuSnapshot,
    GpuWindow,
    KernelLogEvidence,
    MemoryEvidence,
    MetricSummary,
    MigDevice,
    SocketEvidence,
    WatchSummary,
)
from infradoctor.node.kernel import parse_xid_line
from infradoctor.node.rules import (
    NodeOptions,
    n001_gpu_xid,
    n002_gpu_ecc,
    n003_gpu_throttling,
    n004_gpu_memory_pressure,
    n005_gpu_contention,
    n006_host_memory_pressure,
    n007_cpu_saturated,
    n008_disk_full,
    n009_socket_exhaustion,
    n010_pcie_degraded,
    n012_gpu_not_visible,
)

from .builders import GIB, evidence, gpu, host

OPTS = NodeOptions()


def codes(findings) -> list[str]:
    return [f.code for f in findings]


def evaluate(ev, options=None):
    return run_rules(ev, options)


def test_healthy_node_has_no_findings() -> None:
    assert evaluate(evidence(gpu(0), gpu(1))) == []


def test_every_node_rule_has_a_check_over_node_evidence() -> None:
    ev = evidence(gpu(0))
    node_codes = {code for code, rule in catalog().items() if rule.checks_for(ev)}
    assert node_codes == {f"N0{n:02d}" for n in range(1, 13)} - {"N011"}
    assert all(catalog()[code].module.startswith("infradoctor.node.rules.") for code in node_codes)


def kernel_with(*lines: str) -> KernelLogEvidence:
    events = tuple(e for i, line in enumerate(lines, 1) if (e := parse_xid_line(line, i)))
    return KernelLogEvidence(source="kern.log", lines_read=len(lines), xid_events=events, xid_events_total=len(events))


def test_n001_one_finding_per_code_with_action_severity_and_gpu_name() -> None:
    ev = evidence(
        gpu(0, pci_bus_id="00000000:3B:00.0"),
        kernel=kernel_with(
            "[ 10.0] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            "[ 11.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=77, name=python, GPU has fallen off the bus.",
            "[ 12.0] NVRM: Xid (PCI:0000:5e:00): 13, pid=12, name=train.py, Graphics SM Warp Exception",
            "[ 13.0] NVRM: Xid (PCI:0000:5e:00): 45, pid=12, name=train.py, Ch 00000010",
            "[ 14.0] NVRM: Xid (PCI:3B:00): 74, NVLink: fatal error detected on link 3",
        ),
    )
    found = {f.evidence["xid"]: f for f in n001_gpu_xid.check(ev, OPTS)}
    assert set(found) == {79, 13, 45, 74}
    assert found[74].evidence["gpus"] == ["GPU 0 (00000000:3B:00.0)"]  # short PCI form matched too
    assert found[79].severity is Severity.CRITICAL
    assert found[79].evidence["count"] == 2 and found[79].evidence["action"] == "reboot"
    assert found[79].evidence["gpus"] == ["GPU 0 (00000000:3B:00.0)"]
    assert found[79].evidence["pids"] == [77]
    assert found[79].location is not None and found[79].location.line == 1
    assert found[13].severity is Severity.MEDIUM and found[13].evidence["origin"] == "application"
    assert found[13].evidence["processes"] == ["train.py"]
    assert "PCI:0000:5e:00" in found[13].title
    assert found[45].severity is Severity.LOW


def test_n002_pending_remap_uncorrectable_failure_and_retired_pages() -> None:
    assert n002_gpu_ecc.check(evidence(gpu(0)), OPTS) == []
    pending = gpu(0, remapped_rows_pending=True, ecc=EccCounts(3, 2, 10, 2))
    (finding,) = n002_gpu_ecc.check(evidence(pending), OPTS)
    assert finding.severity is Severity.HIGH
    assert "pending" in finding.title and "2 uncorrectable" in finding.title
    failed = gpu(1, remapped_rows_failure=True)
    assert n002_gpu_ecc.check(evidence(failed), OPTS)[0].severity is Severity.CRITICAL
    lifetime = gpu(2, ecc=EccCounts(0, 0, 0, 4))
    assert n002_gpu_ecc.check(evidence(lifetime), OPTS)[0].severity is Severity.MEDIUM
    pre_ampere = gpu(3, retired_pages_single_bit=40, retired_pages_double_bit=20, remapped_rows_pending=None)
    assert n002_gpu_ecc.check(evidence(pre_ampere), OPTS)[0].severity is Severity.CRITICAL
    noisy = gpu(4, ecc=EccCounts(n002_gpu_ecc.CORRECTED_VOLATILE_WARN + 1, 0, 5000, 0))
    assert n002_gpu_ecc.check(evidence(noisy), OPTS)[0].severity is Severity.LOW
    quiet = gpu(5, ecc=EccCounts(n002_gpu_ecc.CORRECTED_VOLATILE_WARN, 0, 5000, 0))
    assert n002_gpu_ecc.check(evidence(quiet), OPTS) == []


@pytest.mark.parametrize(
    "mask,severity",
    [
        (0x1, None),  # idle
        (0x2 | 0x10 | 0x100, None),  # application clocks, sync boost, display: not throttling
        (0x4, None),  # power cap bit at the maximum SM clock: nothing is held down
        (0x40 | 0x20, Severity.HIGH),  # HW + SW thermal
        (0x8, Severity.HIGH),
        (0x80, Severity.HIGH),
    ],
)
def test_n003_ignores_benign_reasons(mask: int, severity: Severity | None) -> None:
    findings = n003_gpu_throttling.check(evidence(gpu(0, clock_event_reasons=mask)), OPTS)
    assert [f.severity for f in findings] == ([severity] if severity else [])


def test_n003_power_cap_counts_only_while_the_gpu_works_below_its_top_clock() -> None:
    working = gpu(0, clock_event_reasons=0x4, sm_clock_mhz=1700, max_sm_clock_mhz=1980, power_draw_w=690.0)
    (finding,) = n003_gpu_throttling.check(evidence(working), OPTS)
    assert finding.severity is Severity.LOW and "690 of 700 W" in finding.title
    # the corpus's RTX 3090: P8, 0%, 35 W of 350 W, 210 MHz with the power-cap bit set is idle, not throttled
    idle = gpu(0, clock_event_reasons=0x4, utilization_gpu_pct=0.0, performance_state=8, power_draw_w=35.0,
               power_limit_w=350.0, sm_clock_mhz=210, max_sm_clock_mhz=2100,
               clock_event_time_s={"sw_power_cap": 9840.3})
    assert n003_gpu_throttling.check(evidence(idle), OPTS) == []
    assert n003_gpu_throttling.check(evidence(dataclasses.replace(idle, utilization_gpu_pct=None)), OPTS) == []
    # busy, but drawing a fifth of the limit: the cap is not what holds it (V100S GPU 6 of the corpus)
    low_draw = dataclasses.replace(working, power_draw_w=140.0)
    assert n003_gpu_throttling.check(evidence(low_draw), OPTS) == []
    # a hardware reason is a fault even on an idle GPU (the corpus's H100s with the power brake asserted)
    braked = dataclasses.replace(idle, clock_event_reasons=0x8 | 0x80, sm_clock_mhz=86)
    (brake,) = n003_gpu_throttling.check(evidence(braked), OPTS)
    assert brake.severity is Severity.HIGH and brake.evidence["reasons"] == ["hw_slowdown", "hw_power_brake_slowdown"]
    assert brake.evidence["held_since_driver_load_s"] == {"sw_power_cap": 9840.3}


def test_n003_power_cap_with_low_clock_is_medium() -> None:
    device = gpu(0, clock_event_reasons=0x4, sm_clock_mhz=1200, max_sm_clock_mhz=1980)
    (finding,) = n003_gpu_throttling.check(evidence(device), OPTS)
    assert finding.severity is Severity.MEDIUM
    assert finding.evidence["reasons"] == ["sw_power_cap"]
    assert finding.evidence["sm_clock_fraction"] == pytest.approx(1200 / 1980, abs=1e-3)


def test_n004_threshold_edge_and_processes() -> None:
    at_limit = gpu(0, memory_used_bytes=int(0.95 * 80 * GIB))
    assert n004_gpu_memory_pressure.check(evidence(at_limit), OPTS) == []
    over = gpu(1, memory_used_bytes=int(0.97 * 80 * GIB))
    (finding,) = n004_gpu_memory_pressure.check(evidence(over), OPTS)
    assert finding.evidence["processes"][0]["pid"] == 1001 and finding.severity is Severity.MEDIUM
    full = gpu(2, memory_used_bytes=80 * GIB)
    assert n004_gpu_memory_pressure.check(evidence(full), OPTS)[0].severity is Severity.HIGH
    custom = NodeOptions(thresholds={"N004.USED_FRACTION": 0.4})
    assert n004_gpu_memory_pressure.check(evidence(gpu(3)), custom)


def test_n005_counts_distinct_compute_processes_with_memory() -> None:
    two = (GpuProcess(1, "a", GIB), GpuProcess(2, "b", 2 * GIB))
    (finding,) = n005_gpu_contention.check(evidence(gpu(0, processes=two)), OPTS)
    assert [p["pid"] for p in finding.evidence["processes"]] == [2, 1] and finding.severity is Severity.MEDIUM
    graphics = (GpuProcess(1, "a", GIB), GpuProcess(2, "Xorg", GIB, kind="graphics"))
    assert n005_gpu_contention.check(evidence(gpu(0, processes=graphics)), OPTS) == []
    # Windows WDDM / vGPU desktop applications: C+G without a memory figure are not competing work
    desktop = tuple(GpuProcess(100 + i, f"app{i}.exe", None, kind="compute+graphics") for i in range(26))
    assert n005_gpu_contention.check(evidence(gpu(0, processes=(*desktop, two[0]))), OPTS) == []
    # an idle GPU shared by two small processes: a note, not contention
    (idle,) = n005_gpu_contention.check(evidence(gpu(0, processes=two, utilization_gpu_pct=0.0)), OPTS)
    assert idle.severity is Severity.INFO


def test_n005_under_mig_counts_per_gpu_instance() -> None:
    apart = (GpuProcess(1, "a", GIB, gpu_instance_id=1), GpuProcess(2, "b", GIB, gpu_instance_id=2))
    assert n005_gpu_contention.check(evidence(gpu(0, processes=apart, mig_enabled=True)), OPTS) == []
    together = (*apart, GpuProcess(3, "c", GIB, gpu_instance_id=2))
    (finding,) = n005_gpu_contention.check(evidence(gpu(0, processes=together, mig_enabled=True,
                                                        utilization_gpu_pct=None)), OPTS)
    assert finding.evidence["gpu_instance_id"] == 2 and [p["pid"] for p in finding.evidence["processes"]] == [2, 3]
    assert finding.severity is Severity.LOW  # MIG reports no utilisation: whether they contend is not known


def test_n004_under_mig_judges_each_instance_slice() -> None:
    slices = (MigDevice(0, 1, 0, int(19.5 * GIB), 20 * GIB), MigDevice(1, 2, 0, 1 * GIB, 20 * GIB))
    procs = (GpuProcess(7, "vllm", 18 * GIB, gpu_instance_id=1, compute_instance_id=0),
             GpuProcess(8, "other", GIB, gpu_instance_id=2, compute_instance_id=0))
    device = gpu(0, mig_enabled=True, mig_devices=slices, processes=procs, memory_used_bytes=20 * GIB)
    (finding,) = n004_gpu_memory_pressure.check(evidence(device), OPTS)
    assert finding.evidence["gpu_instance_id"] == 1 and finding.location.file == "GPU 0 MIG 0 (GI 1, CI 0)"
    assert [p["pid"] for p in finding.evidence["processes"]] == [7]
    # the whole GPU at 98% with roomy slices is not judged as one: the slices are
    roomy = (MigDevice(0, 1, 0, 10 * GIB, 20 * GIB),)
    assert n004_gpu_memory_pressure.check(evidence(gpu(0, mig_enabled=True, mig_devices=roomy,
                                                       memory_used_bytes=int(0.98 * 80 * GIB))), OPTS) == []


def with_memory(available_gib: float, swap_used_gib: float = 0.0, swap_total_gib: float = 8.0):
    mem = MemoryEvidence(total_bytes=64 * GIB, available_bytes=int(available_gib * GIB),
                         used_bytes=int((64 - available_gib) * GIB), swap_total_bytes=int(swap_total_gib * GIB),
                         swap_used_bytes=int(swap_used_gib * GIB))
    return evidence(host=host(memory=mem))


def test_n006_low_available_memory_and_heavy_swap() -> None:
    assert n006_host_memory_pressure.check(with_memory(10), OPTS) == []
    (low,) = n006_host_memory_pressure.check(with_memory(4), OPTS)
    assert low.severity is Severity.HIGH and low.evidence["available_fraction"] == pytest.approx(4 / 64, abs=1e-3)
    assert n006_host_memory_pressure.check(with_memory(1), OPTS)[0].severity is Severity.CRITICAL
    (swap,) = n006_host_memory_pressure.check(with_memory(20, swap_used_gib=6), OPTS)
    assert "swap" in swap.title
    # Little swap in use, even if most of a tiny swap file, is not heavy.
    assert n006_host_memory_pressure.check(with_memory(20, swap_used_gib=0.1, swap_total_gib=0.15), OPTS) == []
    assert n006_host_memory_pressure.check(evidence(host=None), OPTS) == []


def test_n007_utilisation_load_and_watch_mean() -> None:
    base = host()
    busy = dataclasses.replace(base.cpu, utilization_pct=99.0)
    (finding,) = n007_cpu_saturated.check(evidence(host=host(cpu=busy)), OPTS)
    assert finding.severity is Severity.MEDIUM and finding.evidence["utilization_source"] == "snapshot"
    both = dataclasses.replace(busy, load_1m=20.0)
    assert n007_cpu_saturated.check(evidence(host=host(cpu=both)), OPTS)[0].severity is Severity.HIGH
    loaded = dataclasses.replace(base.cpu, load_1m=16.0)
    assert n007_cpu_saturated.check(evidence(host=host(cpu=loaded)), OPTS)[0].evidence["load_per_core"] == 2.0
    calm = WatchSummary(10, 1.0, 9.0, False, {"cpu_util_pct": MetricSummary(10, 10.0, 30.0, 50.0, 60.0)})
    assert n007_cpu_saturated.check(evidence(host=host(cpu=busy), watch=calm), OPTS) == []
    assert n007_cpu_saturated.check(evidence(host=base), OPTS) == []


def disk(total_gib: float, free_gib: float, inodes: tuple[int, int] | None = None) -> DiskUsage:
    total = int(total_gib * GIB)
    free = int(free_gib * GIB)
    return DiskUsage("/data", "/dev/sdb1", "xfs", total, total - free, free,
                     inodes[0] if inodes else None, inodes[1] if inodes else None, ("HF_HOME",))


def test_n008_share_free_space_and_inodes() -> None:
    assert n008_disk_full.check(evidence(host=host(disks=(disk(100, 50),))), OPTS) == []
    (share,) = n008_disk_full.check(evidence(host=host(disks=(disk(100, 5),))), OPTS)
    assert share.severity is Severity.HIGH and share.location.file == "/data"
    (big,) = n008_disk_full.check(evidence(host=host(disks=(disk(20_000, 0.5),))), OPTS)
    assert big.severity is Severity.CRITICAL and "0.5 GiB free" in big.title
    # a small /boot with 0.6 GiB free is judged by share only
    assert n008_disk_full.check(evidence(host=host(disks=(disk(1, 0.6),))), OPTS) == []
    (inodes,) = n008_disk_full.check(evidence(host=host(disks=(disk(100, 50, inodes=(1000, 50)),))), OPTS)
    assert "inodes" in inodes.title


def test_n009_time_wait_ports_and_fds() -> None:
    assert n009_socket_exhaustion.check(evidence(), OPTS) == []
    tw = SocketEvidence({"TIME_WAIT": 20000}, 32768, 60999, 100)
    (finding,) = n009_socket_exhaustion.check(evidence(host=host(sockets=tw)), OPTS)
    assert finding.severity is Severity.MEDIUM and "TIME_WAIT" in finding.title
    ports = SocketEvidence({"ESTABLISHED": 27000}, 32768, 60999, 27000)
    assert n009_socket_exhaustion.check(evidence(host=host(sockets=ports)), OPTS)[0].severity is Severity.HIGH
    fds = FdEvidence(process_open=900, process_soft_limit=1024, process_hard_limit=4096, system_allocated=10,
                     system_max=100)
    (fd_finding,) = n009_socket_exhaustion.check(evidence(host=host(fds=fds)), OPTS)
    assert "file descriptors" in fd_finding.title
    assert n009_socket_exhaustion.check(evidence(host=host(sockets=None)), OPTS) == []


def test_n010_judges_evidence_not_width_alone() -> None:
    (narrow,) = n010_pcie_degraded.check(evidence(gpu(0, pcie_width_current=8)), OPTS)
    assert narrow.severity is Severity.INFO and narrow.evidence["width_degraded"] is True
    # narrower than another GPU of the same model in the same machine: a fault
    found = {f.evidence["gpu"]: f for f in n010_pcie_degraded.check(evidence(gpu(0), gpu(1, pcie_width_current=8)),
                                                                      OPTS)}
    assert set(found) == {1} and found[1].severity is Severity.MEDIUM and found[1].evidence["wider_peer_gpu"] == 0
    # narrow and replaying over a watch: a fault
    replaying = gpu(0, pcie_width_current=8, window=GpuWindow(60.0, 60, pcie_replays=3))
    assert n010_pcie_degraded.check(evidence(replaying), OPTS)[0].severity is Severity.MEDIUM
    # replays at DCGM's rate on a full link
    fast = gpu(0, window=GpuWindow(60.0, 60, pcie_replays=9))
    (errors,) = n010_pcie_degraded.check(evidence(fast), OPTS)
    assert errors.severity is Severity.MEDIUM and errors.evidence["replays_per_min"] == 9.0
    assert n010_pcie_degraded.check(evidence(gpu(0, window=GpuWindow(60.0, 60, pcie_replays=2))), OPTS) == []
    # a replay count read once is history since the driver loaded, not a rate
    assert n010_pcie_degraded.check(evidence(gpu(0, pcie_replay_count=120)), OPTS) == []
    idle_low_gen = gpu(1, pcie_gen_current=1, utilization_gpu_pct=0.0)
    assert n010_pcie_degraded.check(evidence(idle_low_gen), OPTS) == []
    busy_low_gen = gpu(2, pcie_gen_current=3, utilization_gpu_pct=95.0)
    (gen,) = n010_pcie_degraded.check(evidence(busy_low_gen), OPTS)
    assert gen.severity is Severity.LOW and gen.evidence["gen_degraded_under_load"] is True
    # a gen5 card in a gen4 host runs gen4 by design: the link's maximum is the lower of the two
    host_limited = gpu(3, pcie_gen_current=4, pcie_gen_max=4, pcie_gen_max_device=5, pcie_gen_max_host=4)
    assert n010_pcie_degraded.check(evidence(host_limited), OPTS) == []
    unknown = gpu(3, pcie_width_current=None, pcie_gen_current=None)
    assert n010_pcie_degraded.check(evidence(unknown), OPTS) == []


@pytest.mark.parametrize(
    "expectation,visible,fires",
    [
        (GpuExpectation("0,1", (), False, None), False, True),
        (GpuExpectation(None, ("/dev/nvidia0",), False, None), False, True),
        (GpuExpectation(None, (), True, "NVRM version: 550.90.07"), False, True),
        (GpuExpectation("", (), False, None), False, False),  # empty: the user hid the GPUs on purpose
        (GpuExpectation("-1", (), False, None), False, False),
        (GpuExpectation(None, (), False, None), False, False),
        (GpuExpectation("0", ("/dev/nvidia0",), True, None), True, False),
    ],
)
def test_n012_expected_but_not_visible(expectation: GpuExpectation, visible: bool, fires: bool) -> None:
    snapshot = (
        GpuSnapshot("nvml", "libnvidia-ml", "550", "12.4", (gpu(0),), True)
        if visible
        else GpuSnapshot("none", "NVML could not initialise: Driver Not Loaded", None, None, (), False)
    )
    findings = n012_gpu_not_visible.check(evidence(gpu=snapshot, expectation=expectation), OPTS)
    assert codes(findings) == (["N012"] if fires else [])
    if fires:
        assert "Driver Not Loaded" in findings[0].title


def test_n012_names_each_gpu_the_driver_cannot_open() -> None:
    lost = gpu(2, name=None, unavailable={"device": "GPU is lost"})
    (finding,) = n012_gpu_not_visible.check(evidence(gpu(0), lost), OPTS)
    assert finding.evidence["gpu"] == 2 and "GPU is lost" in finding.title


def test_n012_a_report_listing_fewer_gpus_than_attached() -> None:
    snapshot = GpuSnapshot("smi", "dump.txt", "535", "12.2", (gpu(0),), True, attached_gpus=8)
    (finding,) = n012_gpu_not_visible.check(evidence(gpu=snapshot), OPTS)
    assert finding.severity is Severity.MEDIUM and finding.evidence == {
        "source": "probe", "attached_gpus": 8, "listed_gpus": 1, "backend": "smi", "gpu_source": "dump.txt"}


def test_n003_over_a_window_judges_counter_growth_and_throttled_samples() -> None:
    held = gpu(0, window=GpuWindow(60.0, 60, 80.0, 100.0, 0.0, {"hw_thermal_slowdown": 0.3, "sw_power_cap": 0.05}))
    (finding,) = n003_gpu_throttling.check(evidence(held), OPTS)
    assert finding.severity is Severity.HIGH and finding.evidence["held_share"] == {"hw_thermal_slowdown": 0.3}
    capped = gpu(0, window=GpuWindow(60.0, 60, 80.0, 100.0, 0.0, {"sw_power_cap": 0.5}))
    assert n003_gpu_throttling.check(evidence(capped), OPTS)[0].severity is Severity.LOW
    # the power cap's counter grows on an idle GPU too: not throttling while nothing works
    idle = gpu(0, window=GpuWindow(60.0, 60, 1.0, 3.0, 0.0, {"sw_power_cap": 0.9}))
    assert n003_gpu_throttling.check(evidence(idle), OPTS) == []
    # without counters (nvidia-smi's sampled CSV), the share of samples judged throttled
    sampled = gpu(0, window=GpuWindow(20.0, 20, 80.0, 100.0, 0.35))
    (share,) = n003_gpu_throttling.check(evidence(sampled), OPTS)
    assert share.severity is Severity.MEDIUM and share.evidence["throttled_share"] == 0.35
    assert n003_gpu_throttling.check(evidence(gpu(0, window=GpuWindow(20.0, 20, 80.0, 100.0, 0.05))), OPTS) == []
    # throttled right now: the snapshot finding, not a second one from the window
    now = n003_gpu_throttling.check(evidence(dataclasses.replace(sampled, clock_event_reasons=0x40)), OPTS)
    assert [f.severity for f in now] == [Severity.HIGH]
