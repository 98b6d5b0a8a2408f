"""``infradoctor node --watch``: sample the node at a fixed interval, bounded in time and count.

The loop (:func:`watch`) takes its clock and sleep as arguments so tests run it without waiting; it yields each
sample as it is taken, so the caller (the CLI's live view) can show it, record it and stop it at any time. A sample
is cheap by design (psutil counters and a few NVML reads, no process or socket scans): at 1 Hz it costs well under
2% of one core.

Sample values (``None`` when not available): ``cpu_util_pct``, ``load_1m``, ``mem_used_pct``, ``swap_used_pct``,
and per GPU ``gpu<i>_util_pct``, ``gpu<i>_mem_used_pct``, ``gpu<i>_temp_c``, ``gpu<i>_power_w``,
``gpu<i>_sm_clock_mhz``, ``gpu<i>_throttle`` (1 when a non-benign clock event reason is active, else 0).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import psutil

from infradoctor.node.evidence import GpuDevice, MetricSummary, WatchSummary
from infradoctor.node.gpu.base import BENIGN_REASON_MASK, GpuBackend
from infradoctor.stats import evenly_spaced, quantile

MAX_WATCH_SAMPLES = 86_400
"""Most samples one watch takes (a day at 1 Hz) even without ``--duration``."""
MAX_DISTRIBUTION_VALUES = 5000
"""Values kept per metric in ``metrics.distributions``."""
MIN_INTERVAL_S = 0.1
"""Shortest sampling interval accepted."""

Values = Mapping[str, float | None]


@dataclass(frozen=True)
class WatchSample:
    """One sample of the node."""

    index: int
    """0-based sample number."""
    t_s: float
    """Seconds since the watch started."""
    values: Values
    """Metric name -> value (None when not available)."""
    time: str = ""
    """UTC wall-clock time of the sample (ISO-8601)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (one line of ``--record``)."""
        return {"index": self.index, "t_s": round(self.t_s, 4), "time": self.time, "values": dict(self.values)}


@dataclass
class NodeSampler:
    """Takes cheap samples of the host and the GPUs (through the chosen backend)."""

    gpu: GpuBackend | None = None
    """Backend for the GPU values; None samples the host only."""
    _primed: bool = field(default=False, init=False)

    def __call__(self) -> dict[str, float | None]:
        """One sample's values."""
        busy = float(psutil.cpu_percent(None))
        # the first reading covers an unknown span (since process start or the previous caller): not a sample
        values: dict[str, float | None] = {"cpu_util_pct": busy if self._primed else None}
        self._primed = True
        try:
            values["load_1m"] = float(psutil.getloadavg()[0])
        except (OSError, AttributeError):
            values["load_1m"] = None
        vm = psutil.virtual_memory()
        values["mem_used_pct"] = round(100.0 * (vm.total - vm.available) / vm.total, 2) if vm.total else None
        swap = psutil.swap_memory()
        values["swap_used_pct"] = float(swap.percent) if swap.total else 0.0
        if self.gpu is not None:
            for device in self.gpu.sample():
                values.update(gpu_values(device))
        return values


def gpu_values(device: GpuDevice) -> dict[str, float | None]:
    """The sampled values of one GPU."""
    prefix = f"gpu{device.index}_"
    fraction = device.memory_used_fraction
    reasons = device.clock_event_reasons
    return {
        prefix + "util_pct": device.utilization_gpu_pct,
        prefix + "mem_used_pct": round(100.0 * fraction, 2) if fraction is not None else None,
        prefix + "temp_c": device.temperature_c,
        prefix + "power_w": device.power_draw_w,
        prefix + "sm_clock_mhz": float(device.sm_clock_mhz) if device.sm_clock_mhz is not None else None,
        prefix + "throttle": None if reasons is None else float(bool(reasons & ~BENIGN_REASON_MASK)),
    }


def watch(
    sample: Callable[[], Values],
    *,
    interval_s: float,
    duration_s: float | None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    wall_clock: Callable[[], str] | None = None,
    max_samples: int = MAX_WATCH_SAMPLES,
) -> Iterator[WatchSample]:
    """Yield samples every ``interval_s`` until ``duration_s`` has passed or ``max_samples`` were taken.

    ``duration_s`` None runs until the caller stops iterating. Ticks are scheduled from the start, so a slow sample
    does not shift later ones.
    """
    interval = max(MIN_INTERVAL_S, float(interval_s))
    start = clock()
    for index in range(max(1, max_samples)):
        due = start + index * interval
        if duration_s is not None and due - start > duration_s + 1e-9:
            return
        now = clock()
        if due > now:
            sleep(due - now)
        values = sample()
        yield WatchSample(index=index, t_s=clock() - start, values=values, time=wall_clock() if wall_clock else "")


def write_record_line(handle: TextIO, sample: WatchSample) -> None:
    """Append one sample to a ``--record`` JSON-lines file and flush, so an interrupted watch keeps it."""
    handle.write(json.dumps(sample.to_dict(), allow_nan=False, default=_none) + "\n")
    handle.flush()


def _none(_: object) -> None:
    return None


def read_record(lines: Sequence[str]) -> list[WatchSample]:
    """Samples from a ``--record`` file's lines (blank and malformed lines are skipped)."""
    out: list[WatchSample] = []
    for line in lines:
        try:
            data = json.loads(line)
            out.append(WatchSample(int(data["index"]), float(data["t_s"]), dict(data["values"]), str(data["time"])))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def summarize(samples: Sequence[WatchSample], *, interval_s: float, interrupted: bool) -> WatchSummary:
    """Min, mean, p95 and max of every metric over the samples."""
    columns: dict[str, list[float]] = {}
    for sample in samples:
        for name, value in sample.values.items():
            if value is not None and math.isfinite(value):
                columns.setdefault(name, []).append(float(value))
    metrics = {}
    for name, values in columns.items():
        ordered = sorted(values)
        metrics[name] = MetricSummary(
            count=len(values),
            min=round(ordered[0], 4),
            mean=round(sum(values) / len(values), 4),
            p95=round(quantile(ordered, 0.95), 4),
            max=round(ordered[-1], 4),
        )
    elapsed = samples[-1].t_s - samples[0].t_s if len(samples) > 1 else 0.0
    return WatchSummary(
        samples=len(samples), interval_s=interval_s, elapsed_s=round(elapsed, 3), interrupted=interrupted,
        metrics=metrics,
    )


def distributions(samples: Sequence[WatchSample], names: Sequence[str] | None = None) -> dict[str, list[float]]:
    """Sampled values per metric, at most :data:`MAX_DISTRIBUTION_VALUES` each (evenly strided, in time order)."""
    columns: dict[str, list[float]] = {}
    for sample in samples:
        for name, value in sample.values.items():
            if (names is None or name in names) and value is not None and math.isfinite(value):
                columns.setdefault(name, []).append(float(value))
    return {name: evenly_spaced(values, MAX_DISTRIBUTION_VALUES) for name, values in columns.items()}
