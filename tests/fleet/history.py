"""A fleet's history for a real Prometheus, built on the recorded expositions in tests/corpus/metrics.

The metric names and label sets are the recorded ones (dcgm-exporter's T4 capture from the Datadog fixture,
node_exporter's e2e output, kube-state-metrics' own expected output); the values follow a scenario over time:
a busy, healthy fleet with a few nodes sick in known ways from known moments. The history is written as
OpenMetrics text for ``promtool tsdb create-blocks-from openmetrics`` (a backfilled TSDB), or served live by
:func:`exposition` for Prometheus to scrape.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "metrics"
DCGM_RECORDING = CORPUS / "dcgm-exporter-datadog-fixture-t4.prom"
_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}\s+(\S+)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def recorded_gpu() -> tuple[dict[str, str], dict[str, float]]:
    """The recording's second T4 (Hostname 551bdf382151, the fuller label set): its labels and its values."""
    labels: dict[str, str] = {}
    values: dict[str, float] = {}
    for line in DCGM_RECORDING.read_text(encoding="utf-8").splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        found = dict(_LABEL.findall(match.group(2)))
        if found.get("Hostname") == "551bdf382151" or (not labels and found.get("Hostname") == "424773df46e0"):
            values[match.group(1)] = float(match.group(3))
            if found.get("Hostname") == "551bdf382151":
                labels = found
    return labels, values


@dataclass(frozen=True)
class Sick:
    """What goes wrong, where and when (as a fraction of the window)."""

    hot_node: int = 3
    """Node whose GPU ``hot_gpu`` overheats and throttles (N003, N013) from ``hot_at``."""
    hot_gpu: int = 2
    hot_at: float = 0.40
    xid_node: int = 5
    """Node whose GPU 0 reports Xid 79 and goes idle from ``xid_at`` (N001, N013 utilisation)."""
    xid_at: float = 0.60
    memory_node: int = 6
    """Node whose RAM runs out from ``memory_at`` (N006) and whose pod is OOM-killed (N014)."""
    memory_at: float = 0.70
    silent_node: int = 7
    """Node whose dcgm-exporter stops before the window (absent evidence, never healthy)."""


@dataclass(frozen=True)
class Fleet:
    """The fleet and its window."""

    start: float
    """Window start (unix s); the history begins ``before_s`` earlier."""
    end: float
    """Window end."""
    nodes: int = 8
    gpus: int = 4
    interval_s: float = 30.0
    before_s: float = 3600.0
    sick: Sick | None = field(default_factory=Sick)
    seed: int = 7
    slim: bool = False
    """Only the signals the rules read (the benchmark's fleet), to bound the history's size."""
    cpus: int = 16
    """CPUs per node (node_cpu_seconds_total series)."""

    def node(self, i: int) -> str:
        return f"node-{i:04d}" if self.nodes > 999 else f"node-{i:02d}"

    def at(self, fraction: float) -> float:
        return self.start + fraction * (self.end - self.start)


SLIM_GPU = ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
            "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")


def _labels(items: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in items.items())


def gpu_values(fleet: Fleet, node: int, gpu: int, t: float, rng: random.Random) -> dict[str, float]:
    """One GPU's values at time t."""
    sick = fleet.sick
    v = {
        "DCGM_FI_DEV_SM_CLOCK": 1590 - rng.uniform(0, 30), "DCGM_FI_DEV_MEM_CLOCK": 5000,
        "DCGM_FI_DEV_GPU_TEMP": 61 + rng.uniform(-3, 3), "DCGM_FI_DEV_POWER_USAGE": 64 + rng.uniform(-3, 3),
        "DCGM_FI_DEV_GPU_UTIL": 88 + rng.uniform(-6, 6), "DCGM_FI_DEV_MEM_COPY_UTIL": 40 + rng.uniform(-5, 5),
        "DCGM_FI_DEV_ENC_UTIL": 0, "DCGM_FI_DEV_DEC_UTIL": 0, "DCGM_FI_DEV_XID_ERRORS": 0,
        "DCGM_FI_DEV_FB_USED": 11000 + rng.uniform(-300, 300), "DCGM_FI_DEV_FB_RESERVED": 250,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0, "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
        "DCGM_FI_DEV_SLOWDOWN_TEMP": 93, "DCGM_FI_DEV_POWER_MGMT_LIMIT": 70, "DCGM_FI_DEV_PSTATE": 0,
        "DCGM_FI_DEV_FB_TOTAL": 15109, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 128996013 + 64000 * (t - fleet.start),
    }
    if sick is not None and node == sick.hot_node and gpu == sick.hot_gpu and t >= fleet.at(sick.hot_at):
        v.update({"DCGM_FI_DEV_GPU_TEMP": 89 + rng.uniform(-1, 1), "DCGM_FI_DEV_SM_CLOCK": 990 + rng.uniform(-20, 20),
                  "DCGM_FI_DEV_POWER_USAGE": 44 + rng.uniform(-2, 2), "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x60})
    if sick is not None and node == sick.xid_node and gpu == 0 and t >= fleet.at(sick.xid_at):
        v.update({"DCGM_FI_DEV_XID_ERRORS": 79, "DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_DEV_POWER_USAGE": 30,
                  "DCGM_FI_DEV_SM_CLOCK": 300, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x1})
    v["DCGM_FI_DEV_FB_FREE"] = 15109 - v["DCGM_FI_DEV_FB_USED"] - v["DCGM_FI_DEV_FB_RESERVED"]
    v["DCGM_FI_DEV_FB_USED_PERCENT"] = v["DCGM_FI_DEV_FB_USED"] / 15109
    return v


GIB = 1024**3


def host_values(fleet: Fleet, node: int, t: float, rng: random.Random) -> dict[str, float]:
    """One node_exporter's gauges at time t (CPU counters are written separately)."""
    sick = fleet.sick
    total = 256 * GIB
    available = 180 * GIB + rng.uniform(-2, 2) * GIB
    if sick is not None and node == sick.memory_node and t >= fleet.at(sick.memory_at):
        available = 6 * GIB
    return {
        "node_load1": 0.75 * fleet.cpus * (1 + rng.uniform(-0.15, 0.15)), "node_load5": 0.75 * fleet.cpus,
        "node_load15": 0.75 * fleet.cpus,
        "node_memory_MemTotal_bytes": total, "node_memory_MemAvailable_bytes": available,
        "node_memory_MemFree_bytes": available * 0.7, "node_memory_Cached_bytes": available * 0.25,
        "node_memory_Buffers_bytes": 2 * GIB, "node_memory_SwapTotal_bytes": 0, "node_memory_SwapFree_bytes": 0,
        "node_filefd_allocated": 5000 + rng.randint(0, 50), "node_filefd_maximum": 9223372036854775807,
        "node_sockstat_TCP_tw": 40 + rng.randint(0, 10), "node_sockstat_TCP_inuse": 80,
    }


def lines(fleet: Fleet) -> Iterator[str]:
    """The history as OpenMetrics sample lines, one family at a time, each series in time order."""
    template, _ = recorded_gpu()
    rng_seed = fleet.seed
    times = []
    t = fleet.start - fleet.before_s
    while t <= fleet.end + 1e-6:
        times.append(round(t, 3))
        t += fleet.interval_s
    sick = fleet.sick
    gpu_metrics = SLIM_GPU if fleet.slim else tuple(gpu_values(fleet, 0, 0, fleet.start, random.Random(0)))
    for metric in gpu_metrics:
        for node in range(fleet.nodes):
            for gpu in range(fleet.gpus):
                rng = random.Random(zlib.crc32(f"{rng_seed}/{metric}/{node}/{gpu}".encode()))
                labels = dict(template)
                labels.update({"gpu": str(gpu), "UUID": f"GPU-{node:04x}{gpu:04x}-0da5-6d26-a36a-e7af1ce2586e",
                               "device": f"nvidia{gpu}", "Hostname": fleet.node(node),
                               "instance": f"{fleet.node(node)}:9400", "job": "dcgm-exporter"})
                if fleet.slim:
                    labels = {k: labels[k] for k in ("gpu", "UUID", "modelName", "Hostname", "instance", "job")}
                text = _labels(labels)
                for at in times:
                    if sick is not None and node == sick.silent_node and at >= fleet.start - 600:
                        break
                    value = gpu_values(fleet, node, gpu, at, rng)[metric]
                    yield f"{metric}{{{text}}} {value:.6g} {at:.3f}"
    host_metrics = tuple(host_values(fleet, 0, fleet.start, random.Random(0)))
    for metric in host_metrics:
        for node in range(fleet.nodes):
            rng = random.Random(zlib.crc32(f"{rng_seed}/{metric}/{node}".encode()))
            text = _labels({"instance": f"{fleet.node(node)}:9100", "job": "node"})
            for at in times:
                yield f"{metric}{{{text}}} {host_values(fleet, node, at, rng)[metric]:.10g} {at:.3f}"
    for node in range(fleet.nodes):
        for cpu in range(fleet.cpus):
            for mode, share in (("idle", 0.55), ("user", 0.35), ("system", 0.08), ("iowait", 0.02)):
                text = _labels({"cpu": str(cpu), "instance": f"{fleet.node(node)}:9100", "job": "node",
                                "mode": mode})
                for at in times:
                    yield f"node_cpu_seconds_total{{{text}}} {1e6 + share * (at - times[0]):.3f} {at:.3f}"
    fs = {"device": "/dev/nvme0n1p1", "fstype": "ext4", "mountpoint": "/", "job": "node"}
    for metric, value in (("node_filesystem_size_bytes", 1000 * GIB), ("node_filesystem_avail_bytes", 600 * GIB),
                          ("node_filesystem_free_bytes", 650 * GIB)):
        for node in range(fleet.nodes):
            text = _labels({**fs, "instance": f"{fleet.node(node)}:9100"})
            for at in times:
                yield f"{metric}{{{text}}} {value:.10g} {at:.3f}"
    yield from _kube(fleet, times)


def _kube(fleet: Fleet, times: list[float]) -> Iterator[str]:
    """kube-state-metrics: one model-server pod per node; the sick memory node's is OOM-killed and restarts."""
    sick = fleet.sick
    base = {"job": "kube-state-metrics", "instance": "ksm:8080"}
    for node in range(fleet.nodes):
        pod = {"namespace": "serving", "pod": f"vllm-{node}", "uid": f"uid{node}"}
        text = _labels({**base, **pod, "node": fleet.node(node), "host_ip": f"10.0.0.{node}", "pod_ip": "",
                        "created_by_kind": "StatefulSet", "created_by_name": "vllm", "priority_class": ""})
        for at in times:
            yield f"kube_pod_info{{{text}}} 1 {at:.3f}"
    for node in range(fleet.nodes):
        text = _labels({**base, "container": "server", "namespace": "serving", "pod": f"vllm-{node}",
                        "uid": f"uid{node}"})
        for at in times:
            restarts = 0
            if sick is not None and node == sick.memory_node and at >= fleet.at(sick.memory_at) + 120:
                restarts = 1 + int((at - fleet.at(sick.memory_at) - 120) // 600)
            yield f"kube_pod_container_status_restarts_total{{{text}}} {restarts} {at:.3f}"
    if sick is not None and sick.memory_node < fleet.nodes:
        node = sick.memory_node
        for metric, extra, value in (("kube_pod_container_status_last_terminated_reason", {"reason": "OOMKilled"}, 1),
                                     ("kube_pod_container_status_last_terminated_exitcode", {}, 137)):
            text = _labels({**base, "container": "server", "namespace": "serving", "pod": f"vllm-{node}",
                            **extra, "uid": f"uid{node}"})
            for at in times:
                if at >= fleet.at(sick.memory_at) + 120:
                    yield f"{metric}{{{text}}} {value} {at:.3f}"


def write_openmetrics(fleet: Fleet, path: Path) -> int:
    """The history in OpenMetrics text (ends with ``# EOF``); returns the sample count."""
    count = 0
    with path.open("w", encoding="utf-8") as fh:
        for line in lines(fleet):
            fh.write(line)
            fh.write("\n")
            count += 1
        fh.write("# EOF\n")
    return count
