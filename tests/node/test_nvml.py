"""The NVML backend: the real library where it is absent, and recorded values with NVML's own error classes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pynvml
import pytest

from infradoctor.node.gpu import select_backend
from infradoctor.node.gpu.none import NoGpuBackend
from infradoctor.node.gpu.nvml import (
    NA,
    NvmlBackend,
    NvmlQuery,
    RecordFormatError,
    RecordingNvml,
    ReplayNvml,
    record_live_nvml,
    replay_backend,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "node"


def healthy_record() -> dict:
    return json.loads((FIXTURES / "healthy_8x_h100.nvml.json").read_text(encoding="utf-8"))


def real_nvml_available() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(real_nvml_available(), reason="NVML is available here; the GPU suite covers it")
def test_real_pynvml_without_driver_is_not_available() -> None:
    probe = NvmlBackend().probe()
    assert probe.snapshot.available is False and probe.snapshot.devices == ()
    assert "NVML could not initialise" in probe.notes[0].message
    backend, notes = select_backend("auto")
    assert backend.name in ("smi", "none")


def test_query_helper_maps_every_nvml_error_and_missing_functions() -> None:
    class Lib:
        def nvmlDeviceGetName(self, handle):  # noqa: N802
            return "GPU"

        def nvmlDeviceGetRemappedRows(self, handle):  # noqa: N802
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

        def nvmlDeviceGetPowerUsage(self, handle):  # noqa: N802
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    query = NvmlQuery(Lib())
    assert query("nvmlDeviceGetName", 0) == "GPU" and query.last_reason is None
    assert query("nvmlDeviceGetRemappedRows", 0) is NA and query.last_reason == "Not Supported"
    assert query("nvmlDeviceGetPowerUsage", 0, default=-1) == -1
    assert query.last_reason == "Insufficient Permissions"
    assert query("nvmlDeviceGetFutureThing", 0) is NA
    assert query.failures["nvmlDeviceGetFutureThing"] == "function not in this nvidia-ml-py"
    assert not NA and repr(NA) == "N/A"


def test_replay_gives_pynvml_shapes_and_raises_recorded_errors() -> None:
    lib = ReplayNvml(healthy_record())
    handle = lib.nvmlDeviceGetHandleByIndex(3)
    assert lib.nvmlDeviceGetMemoryInfo(handle, 0x02000028).total == 81559 * 1024 * 1024
    assert lib.nvmlDeviceGetPciInfo(handle).busId == "00000000:5D:00.0"
    assert lib.nvmlDeviceGetComputeRunningProcesses(handle)[0].usedGpuMemory == 72404 * 1024 * 1024
    with pytest.raises(pynvml.NVMLError_NotSupported):
        lib.nvmlDeviceGetRetiredPages(handle, 0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        lib.nvmlDeviceGetFanSpeed(handle)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        lib.nvmlDeviceGetHandleByIndex(8)


def test_not_supported_functions_are_none_with_reason() -> None:
    record = healthy_record()
    device = record["devices"][0]
    for key in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetCurrPcieLinkWidth"):
        device[key] = {"nvml_error": "NVML_ERROR_NOT_SUPPORTED"}
    device["nvmlDeviceGetTemperature(0)"] = {"nvml_error": "NVML_ERROR_NO_PERMISSION"}
    del device["nvmlDeviceGetCurrentClocksEventReasons"]  # older driver: only the throttle-reasons call
    device["nvmlDeviceGetCurrentClocksThrottleReasons"] = 0x44
    probe = NvmlBackend(ReplayNvml(record)).probe()
    gpu = probe.snapshot.devices[0]
    assert gpu.power_draw_w is None and gpu.power_limit_w == 700.0
    assert gpu.remapped_rows_pending is None and gpu.pcie_width_current is None and gpu.temperature_c is None
    assert gpu.unavailable["power_draw"] == "Not Supported"
    assert gpu.unavailable["temperature"] == "Insufficient Permissions"
    assert gpu.clock_event_reasons == 0x44
    messages = [n.message for n in probe.notes]
    assert "nvmlDeviceGetTemperature: Insufficient Permissions" in messages
    assert not any("RemappedRows" in m or "RetiredPages" in m for m in messages)  # expected per GPU generation
    assert probe.snapshot.devices[1].power_draw_w == pytest.approx(620.47)


def test_memory_falls_back_to_v1_on_old_drivers() -> None:
    record = healthy_record()
    device = record["devices"][0]
    v2 = device.pop("nvmlDeviceGetMemoryInfo(33554472)")
    device["nvmlDeviceGetMemoryInfo"] = {"total": v2["total"], "free": v2["free"], "used": v2["used"] + v2["reserved"]}
    probe = NvmlBackend(ReplayNvml(record)).probe()
    gpu = probe.snapshot.devices[0]
    assert gpu.memory_total_bytes == v2["total"] and gpu.memory_used_bytes == v2["used"] + v2["reserved"]
    assert "memory" not in gpu.unavailable
    assert not any("MemoryInfo" in n.message for n in probe.notes)
    device.pop("nvmlDeviceGetMemoryInfo")
    lost_memory = NvmlBackend(ReplayNvml(record)).probe()
    assert lost_memory.snapshot.devices[0].memory_used_bytes is None
    assert lost_memory.snapshot.devices[0].unavailable["memory"] == "Function Not Found"


@pytest.mark.parametrize(
    "error", ["NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_LIB_RM_VERSION_MISMATCH"]
)
def test_init_failure_is_not_available(error: str) -> None:
    record = healthy_record()
    record["system"]["nvmlInit"] = {"nvml_error": error}
    probe = NvmlBackend(ReplayNvml(record)).probe()
    assert probe.snapshot.available is False
    assert str(pynvml.NVMLError(getattr(pynvml, error))) in probe.notes[0].message


def test_record_replay_round_trip(tmp_path: Path) -> None:
    original = healthy_record()
    recorder = RecordingNvml(ReplayNvml(copy.deepcopy(original)))
    first = NvmlBackend(recorder).probe()
    again = recorder.record({p.pid: p.name for d in first.snapshot.devices for p in d.processes if p.name})
    for recorded, source in zip(again["devices"], original["devices"], strict=True):
        for key, value in recorded.items():
            # a call the source record lacks was answered "Function Not Found", and recorded as such
            assert source.get(key, {"nvml_error": "NVML_ERROR_FUNCTION_NOT_FOUND"}) == value, key
    path = tmp_path / "again.json"
    path.write_text(json.dumps(again), encoding="utf-8")
    second = replay_backend(path).probe()
    assert second.snapshot.devices == first.snapshot.devices


def test_save_record_on_this_machine(tmp_path: Path) -> None:
    path = tmp_path / "here.json"
    probe = record_live_nvml(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "infradoctor.nvml-record/1"
    replayed = replay_backend(path).probe()
    assert replayed.snapshot.available == probe.snapshot.available
    assert len(replayed.snapshot.devices) == len(probe.snapshot.devices)


@pytest.mark.parametrize(
    "content", ["not json", "[]", '{"format": "other"}', '{"format": "infradoctor.nvml-record/1", "system": {}}',
                '{"format": "infradoctor.nvml-record/1", "system": {}, "devices": [1]}'],
)
def test_bad_records_select_the_none_backend(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    backend, _ = select_backend("auto", nvml_record=path)
    assert isinstance(backend, NoGpuBackend)
    probe = backend.probe()
    assert "cannot use NVML record" in probe.notes[0].message
    if content.startswith("{"):
        with pytest.raises(RecordFormatError):
            ReplayNvml(json.loads(content))


def test_sample_reads_the_fast_fields_only() -> None:
    record = healthy_record()
    calls: list[str] = []

    class Counting(ReplayNvml):
        def __getattribute__(self, name):
            if name.startswith("nvmlDevice"):
                calls.append(name)
            return super().__getattribute__(name)

    devices = NvmlBackend(Counting(record)).sample()
    assert len(devices) == 8 and devices[2].utilization_gpu_pct == 97.0 and devices[2].temperature_c == 60.0
    assert "nvmlDeviceGetTotalEccErrors" not in calls and "nvmlDeviceGetComputeRunningProcesses" not in calls


def test_recorded_nvml_and_smi_xml_of_one_node_agree() -> None:
    from infradoctor.node.gpu.smi_xml import SmiXmlBackend

    nvml = replay_backend(FIXTURES / "healthy_8x_h100.nvml.json").probe().snapshot
    smi = SmiXmlBackend(report_file=FIXTURES / "healthy_8x_h100.xml").probe().snapshot
    assert (nvml.driver_version, nvml.cuda_version) == (smi.driver_version, smi.cuda_version)
    fields = ("name", "uuid", "pci_bus_id", "utilization_gpu_pct", "memory_used_bytes", "memory_total_bytes",
              "temperature_c", "power_draw_w", "power_limit_w", "sm_clock_mhz", "max_sm_clock_mhz",
              "clock_event_reasons", "ecc", "remapped_rows_pending", "remapped_rows_failure", "pcie_gen_current",
              "pcie_gen_max", "pcie_width_current", "pcie_width_max", "persistence_mode", "mig_enabled")
    for a, b in zip(nvml.devices, smi.devices, strict=True):
        for field in fields:
            assert getattr(a, field) == getattr(b, field), (a.index, field)
        assert [p.pid for p in a.processes] == [p.pid for p in b.processes]


@pytest.mark.parametrize("value", ["12", "9" * 400, 2**70, -5, 1.5, None, [], {}, [1], {"gpu": "97"}, True])
def test_every_recorded_answer_of_the_wrong_type_is_not_available(value) -> None:
    """Issue 17: a string where a number belongs crashed about 20 readers; every answer is typed and bounded."""
    record = healthy_record()
    record["devices"] = record["devices"][:2]
    record["system"]["nvmlDeviceGetCount"] = 2
    healthy_second = NvmlBackend(ReplayNvml(record)).probe().snapshot.devices[1]
    for key in sorted(record["devices"][0]):
        broken = copy.deepcopy(record)
        broken["devices"][0][key] = value
        backend = NvmlBackend(ReplayNvml(broken))
        probe = backend.probe()
        backend.sample()
        gpu = probe.snapshot.devices[0]
        assert gpu.index == 0 and probe.snapshot.devices[1] == healthy_second, key
        assert type(gpu).from_dict(gpu.to_dict()) == gpu
    # a typed field that received text is said to be malformed, not silently zero
    broken = copy.deepcopy(record)
    broken["devices"][0]["nvmlDeviceGetTemperature(0)"] = "58"
    gpu = NvmlBackend(ReplayNvml(broken)).probe().snapshot.devices[0]
    assert gpu.temperature_c is None and gpu.unavailable["temperature"] == "malformed value in the NVML answer"


@pytest.mark.parametrize("count", ["8", -1, 2**40, 10**9])
def test_a_broken_device_count_is_bounded(count) -> None:
    record = healthy_record()
    record["system"]["nvmlDeviceGetCount"] = count
    probe = NvmlBackend(ReplayNvml(record)).probe()
    if isinstance(count, int) and count > 0:
        assert len(probe.snapshot.devices) == 64 and any("read the first 64" in n.message for n in probe.notes)
    else:
        assert not probe.snapshot.available and "not a count" in probe.notes[0].message


def test_deeply_nested_or_huge_records_are_refused_or_unavailable(tmp_path: Path) -> None:
    record = healthy_record()
    deep: object = 1
    for _ in range(200):
        deep = {"x": deep}
    record["devices"][0]["nvmlDeviceGetUtilizationRates"] = deep
    gpu = NvmlBackend(ReplayNvml(record)).probe().snapshot.devices[0]
    assert gpu.utilization_gpu_pct is None and gpu.unavailable["utilization"] == "Unknown Error"
    path = tmp_path / "huge.json"
    path.write_text('{"format": "infradoctor.nvml-record/1", "pad": "' + "x" * (17 * 1024 * 1024) + '"}')
    backend, _ = select_backend("auto", nvml_record=path)
    assert isinstance(backend, NoGpuBackend) and "over the limit" in backend.reason
    record = healthy_record()
    record["process_names"] = {"not a pid": "x", "-3": "y", "41210": 7, "41211": "python"}
    assert ReplayNvml(record).process_names == {41211: "python"}


def mig_record() -> dict:
    """GPU 0 of the healthy record in MIG mode with two MIG devices, and processes in instance 1."""
    record = healthy_record()
    device = record["devices"][0]
    device["nvmlDeviceGetMigMode"] = [1, 1]
    device["nvmlDeviceGetMaxMigDeviceCount"] = 7
    device["nvmlDeviceGetUtilizationRates"] = {"nvml_error": "NVML_ERROR_NOT_SUPPORTED"}  # as under MIG
    device["nvmlDeviceGetMigDeviceHandleByIndex(0)"] = {"mig_device": 0}
    device["nvmlDeviceGetMigDeviceHandleByIndex(1)"] = {"mig_device": 1}
    for i in range(2, 7):
        device[f"nvmlDeviceGetMigDeviceHandleByIndex({i})"] = {"nvml_error": "NVML_ERROR_NOT_FOUND"}
    gib = 1024**3
    device["mig_devices"] = {
        str(i): {"nvmlDeviceGetMemoryInfo": {"total": 40 * gib, "free": int((40 - used) * gib), "used": int(used * gib)},
                 "nvmlDeviceGetGpuInstanceId": gi, "nvmlDeviceGetComputeInstanceId": 0,
                 "nvmlDeviceGetUUID": f"MIG-{i}", "nvmlDeviceGetAttributes": {"multiprocessorCount": 66}}
        for i, (gi, used) in enumerate(((1, 39.5), (2, 1)))
    }
    device["nvmlDeviceGetComputeRunningProcesses"] = [
        {"pid": pid, "usedGpuMemory": 10 * gib, "gpuInstanceId": 1, "computeInstanceId": 0} for pid in (7, 8, 9)]
    return record


def test_mig_devices_and_their_processes_are_read_and_judged() -> None:
    from infradoctor.findings import run_rules

    from .builders import evidence

    probe = NvmlBackend(ReplayNvml(mig_record())).probe()
    gpu = probe.snapshot.devices[0]
    assert gpu.mig_enabled is True and gpu.utilization_gpu_pct is None
    assert [(m.index, m.gpu_instance_id, m.multiprocessor_count, m.uuid) for m in gpu.mig_devices] == [
        (0, 1, 66, "MIG-0"), (1, 2, 66, "MIG-1")]
    assert {p.gpu_instance_id for p in gpu.processes} == {1}
    assert probe.snapshot.devices[1].mig_devices == ()
    assert not any("Mig" in n.message for n in probe.notes)
    codes = {(f.code, f.evidence.get("gpu_instance_id")) for f in run_rules(evidence(gpu, gpu=probe.snapshot))}
    assert ("N004", 1) in codes and ("N005", 1) in codes and ("N004", 2) not in codes


def test_mig_record_round_trips_through_the_recorder() -> None:
    # process names come from the record, never from this machine's /proc (pids 7-9 may exist here, or come and go)
    def no_name(pid: int) -> str | None:
        return None

    first = NvmlBackend(RecordingNvml(ReplayNvml(mig_record())), process_name=no_name).probe()
    recorder = RecordingNvml(ReplayNvml(mig_record()))
    NvmlBackend(recorder, process_name=no_name).probe()
    again = NvmlBackend(ReplayNvml(recorder.record()), process_name=no_name).probe()
    assert again.snapshot.devices == first.snapshot.devices
    assert again.snapshot.devices[0].mig_devices[0].memory_used_bytes == int(39.5 * 1024**3)


def test_a_pid_in_the_compute_and_the_graphics_list_is_one_desktop_process() -> None:
    record = healthy_record()
    device = record["devices"][0]
    device["nvmlDeviceGetComputeRunningProcesses"] = [{"pid": 5, "usedGpuMemory": None}]
    device["nvmlDeviceGetGraphicsRunningProcesses"] = [{"pid": 5, "usedGpuMemory": None}, {"pid": 6, "usedGpuMemory": 1}]
    procs = NvmlBackend(ReplayNvml(record)).probe().snapshot.devices[0].processes
    assert [(p.pid, p.kind, p.used_memory_bytes) for p in procs] == [(5, "compute+graphics", None), (6, "graphics", 1)]
