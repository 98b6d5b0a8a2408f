"""``infradoctor node --watch``: sample the node at a fixed interval, bounded in time and count.

The loop (:func:`watch`) takes its clock and sleep as arguments so tests run it without waiting; it yields each
sample as it is taken, so the caller (the CLI's live view) can show it, record it and stop it at any time. A sample
is cheap by design (psutil counters and a few NVML reads, no process or socket scans): at 1 Hz it costs well under
2% of one core.

Sample values (``None`` when not available): ``cpu_util_pct``, ``load_1m``, ``mem_used_pct``, ``swap_used_pct``,
and per GPU ``gpu<i>_util_pct``, ``gpu<i>_mem_used_pct``, ``gpu<i>_temp_c``, ``gpu<i>_power_w``,
``gpu<i>_sm_clock_mhz``, ``gpu<i>_throttle`` (1 when N003 judges the GPU throttled in that sample, else 0), and the
GPU's counters, ``gpu<i>_counter_pcie_replays`` and ``gpu<i>_counter_held_s_<reason>`` (cumulative; kept in
``--record`` lines, left out of the summary). :func:`gpu_windows` turns the samples into each GPU's
:class:`~infradoctor.node.evidence.GpuWindow`: counter growth over the watch, utilisation and the throttled share,
which the rules judge instead of one snapshot.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import psutil

from infradoctor.bounded import load_json, read_float, read_int
from infradoctor.node.evidence import GpuDevice, GpuWindow, MetricSummary, WatchSummary
from infradoctor.node.gpu.base import GpuBackend
from infradoctor.node.rules.n003_gpu_throttling import throttling_reasons
from infradoctor.stats import evenly_spaced, quantile

MAX_WATCH_SAMPLES = 86_400
"""Most samples one watch takes (a day at 1 Hz) even without ``--duration``."""
MAX_DISTRIBUTION_VALUES = 5000
"""Values kept per metric in ``metrics.distributions``."""
MIN_INTERVAL_S = 0.1
"""Shortest sampling interval accepted."""
MAX_RECORD_LINE_CHARS = 1_000_000
"""Longest ``--record`` line read back."""
MAX_RECORD_VALUES = 10_000
"""Values read back from one ``--record`` line."""
COUNTER_MARK = "_counter_"
"""Sample names holding cumulative counters (not summarised: their growth is what counts)."""

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
    values: dict[str, float | None] = {
        prefix + "util_pct": device.utilization_gpu_pct,
        prefix + "mem_used_pct": round(100.0 * fraction, 2) if fraction is not None else None,
        prefix + "temp_c": device.temperature_c,
        prefix + "power_w": device.power_draw_w,
        prefix + "sm_clock_mhz": float(device.sm_clock_mhz) if device.sm_clock_mhz is not None else None,
        prefix + "throttle": None if device.clock_event_reasons is None else float(bool(throttling_reasons(device))),
    }
    if device.pcie_replay_count is not None:
        values[prefix + "counter_pcie_replays"] = float(device.pcie_replay_count)
    for reason, seconds in device.clock_event_time_s.items():
        values[f"{prefix}counter_held_s_{reason}"] = seconds
    return values


def _growth(first: float | None, last: float | None) -> float | None:
    """How much a counter grew; None when unknown or when it went back (a driver reload reset it)."""
    if first is None or last is None or last < first:
        return None
    return last - first


def gpu_windows(samples: Sequence[WatchSample]) -> dict[int, GpuWindow]:
    """Each GPU's window over the samples: counter growth, utilisation, and the share of samples throttled."""
    if len(samples) < 2:
        return {}
    seconds = samples[-1].t_s - samples[0].t_s
    if seconds <= 0:
        return {}
    indexes = sorted({int(name[3:].split("_", 1)[0]) for s in samples for name in s.values
                      if name.startswith("gpu") and name[3:].split("_", 1)[0].isdigit()})
    windows = {}
    for index in indexes:
        prefix = f"gpu{index}_"
        util = [v for s in samples if (v := s.values.get(prefix + "util_pct")) is not None]
        throttle = [v for s in samples if (v := s.values.get(prefix + "throttle")) is not None]
        first, last = samples[0].values, samples[-1].values
        replays = _growth(first.get(prefix + "counter_pcie_replays"), last.get(prefix + "counter_pcie_replays"))
        held = {}
        mark = prefix + "counter_held_s_"
        for name in last:
            if name.startswith(mark):
                grown = _growth(first.get(name), last.get(name))
                if grown is not None:
                    held[name[len(mark):]] = round(min(1.0, grown / seconds), 4)
        windows[index] = GpuWindow(
            seconds=round(seconds, 3),
            samples=max(len(util), len(throttle)),
            utilization_gpu_mean_pct=round(sum(util) / len(util), 2) if util else None,
            utilization_gpu_max_pct=max(util) if util else None,
            throttled_sample_share=round(sum(throttle) / len(throttle), 4) if throttle else None,
            clock_event_share=held,
            pcie_replays=None if replays is None else int(replays),
        )
    return windows


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
    """Samples from a ``--record`` file's lines (blank, malformed and out-of-range lines are skipped)."""
    out: list[WatchSample] = []
    for line in lines:
        try:
            data = load_json(line, max_chars=MAX_RECORD_LINE_CHARS)
        except ValueError:
            continue
        if not isinstance(data, Mapping) or not isinstance(data.get("values"), Mapping):
            continue
        index, t_s = read_int(data.get("index"), low=0), read_float(data.get("t_s"), low=0.0)
        if index is None or t_s is None:
            continue
        values = {str(k)[:100]: read_float(v) if isinstance(v, (int, float)) else None
                  for k, v in list(data["values"].items())[:MAX_RECORD_VALUES]}
        stamp = data.get("time")
        out.append(WatchSample(index, t_s, values, stamp[:64] if isinstance(stamp, str) else ""))
    return out


def summarize(samples: Sequence[WatchSample], *, interval_s: float, interrupted: bool) -> WatchSummary:
    """Min, mean, p95 and max of every metric over the samples."""
    columns: dict[str, list[float]] = {}
    for sample in samples:
        for name, value in sample.values.items():
            if value is not None and math.isfinite(value) and COUNTER_MARK not in name:
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
            if ((names is None or name in names) and value is not None and math.isfinite(value)
                    and COUNTER_MARK not in name):
                columns.setdefault(name, []).append(float(value))
    return {name: evenly_spaced(values, MAX_DISTRIBUTION_VALUES) for name, values in columns.items()}
