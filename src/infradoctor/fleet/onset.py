"""When each finding's signal went bad: bounded range queries for the entities the findings name.

For each finding code that has a signal to follow, one range query over the window for the nodes it names (at
most :data:`MAX_ENTITIES` per code), and the first step at or beyond the rule's own threshold. The same range data
gives the write-up's timeline of the worst series, with the fleet's median for contrast.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infradoctor.findings import Finding
from infradoctor.fleet import queries as q
from infradoctor.fleet.evidence import Onset, SeriesLine, Window
from infradoctor.fleet.prom import Answer, PrometheusClient
from infradoctor.node.rules import (
    n004_gpu_memory_pressure,
    n006_host_memory_pressure,
    n007_cpu_saturated,
    n008_disk_full,
    n009_socket_exhaustion,
)

MAX_ENTITIES = 20
"""Entities followed over time per code."""
TIMELINE_SERIES = 5
"""Worst series kept for the timeline."""


@dataclass(frozen=True)
class Follow:
    """How to follow one code's signal over time."""

    signal: str
    """Signal name shown."""
    expr: Callable[[q.Scope, str], str]
    """PromQL for the given node regex (an extra matcher), one series per ``keys``."""
    keys: tuple[str, ...]
    """Labels naming the entity (node, and gpu for GPU signals)."""
    bad: Callable[[float], bool]
    """Whether a value is at or beyond the rule's threshold."""
    threshold: float
    """The threshold, for the evidence."""
    whole_fleet: Callable[[q.Scope], str] | None = None
    """The fleet median of the same signal (one series), for the timeline."""


def _gpu_metric(signal: str) -> q.Signal:
    return next(s for s in q.GPU_SIGNALS if s.name == signal)


def _sel(scope: q.Scope, names: Sequence[str], regex: str, extra: str = "") -> str:
    label = scope.node_label if scope.node_label.lower() != "hostname" else "Hostname"
    matchers = [m for m in (f'{label}=~"{regex}"' if regex else "", extra) if m]
    return scope.select(names, ",".join(matchers))


def _by_gpu(expr: str, scope: q.Scope) -> str:
    return f"max by ({q.NODE}, gpu) ({scope.keyed(expr)}) < {q.BLANK_LIMIT:g}"


def _mem_fraction(scope: q.Scope, regex: str) -> str:
    used = _sel(scope, ("DCGM_FI_DEV_FB_USED",), regex)
    free = _sel(scope, ("DCGM_FI_DEV_FB_FREE",), regex)
    return _by_gpu(f"({used} / ignoring(__name__) ({used} + ignoring(__name__) {free}))", scope)


def _fault_mask(scope: q.Scope, regex: str) -> str:
    mask = _sel(scope, _gpu_metric("clock_reasons").metrics, regex)
    bits = " + ".join(f"floor({mask} / {bit}) % 2" for bit in q.FAULT_BITS)
    return _by_gpu(f"({bits})", scope)


def _gpu_signal(signal: str) -> Callable[[q.Scope, str], str]:
    return lambda scope, regex: _by_gpu(_sel(scope, _gpu_metric(signal).metrics, regex), scope)


def _host(expr: Callable[[q.Scope, str], str]) -> Callable[[q.Scope, str], str]:
    return lambda scope, regex: f"max by ({q.NODE}) ({scope.keyed(expr(scope, regex))})"


def _rate_window(scope: q.Scope) -> str:
    step = float(scope.step.rstrip("s"))
    return f"{max(300, round(4 * step))}s"


FOLLOW: dict[str, Follow] = {
    "N001": Follow("xid", _gpu_signal("xid"), (q.NODE, "gpu"), lambda v: v > 0, 0.0),
    "N002": Follow("ecc_dbe_volatile", _gpu_signal("ecc_dbe_volatile"), (q.NODE, "gpu"), lambda v: v > 0, 0.0),
    "N003": Follow("fault_throttle_bits", _fault_mask, (q.NODE, "gpu"), lambda v: v > 0, 0.0),
    "N004": Follow("fb_used_fraction", _mem_fraction, (q.NODE, "gpu"),
                   lambda v: v > n004_gpu_memory_pressure.USED_FRACTION, n004_gpu_memory_pressure.USED_FRACTION),
    "N006": Follow("mem_available_fraction", _host(lambda s, r: f"({_sel(s, ('node_memory_MemAvailable_bytes',), r)}"
                                                             f" / ignoring(__name__) "
                                                             f"{_sel(s, ('node_memory_MemTotal_bytes',), r)})"),
                   (q.NODE,), lambda v: v < n006_host_memory_pressure.AVAILABLE_FRACTION,
                   n006_host_memory_pressure.AVAILABLE_FRACTION),
    "N008": Follow("disk_used_fraction",
                   _host(lambda s, r: f"(1 - {_sel(s, ('node_filesystem_avail_bytes',), r)} / ignoring(__name__) "
                                      f"{_sel(s, ('node_filesystem_size_bytes',), r)})"),
                   (q.NODE,), lambda v: v > n008_disk_full.USED_FRACTION, n008_disk_full.USED_FRACTION),
    "N009": Follow("fds_used_fraction",
                   _host(lambda s, r: f"({_sel(s, ('node_filefd_allocated',), r)} / ignoring(__name__) "
                                      f"{_sel(s, ('node_filefd_maximum',), r)})"),
                   (q.NODE,), lambda v: v >= n009_socket_exhaustion.FD_FRACTION, n009_socket_exhaustion.FD_FRACTION),
}
"""Codes whose signal can be followed over time, with their rule's threshold."""


def _cpu_expr(scope: q.Scope, regex: str) -> str:
    w = _rate_window(scope)
    idle_sel = _sel(scope, ("node_cpu_seconds_total",), regex, 'mode="idle"')
    every_sel = _sel(scope, ("node_cpu_seconds_total",), regex)
    idle = scope.keyed(f"rate({idle_sel}[{w}])")
    every = scope.keyed(f"rate({every_sel}[{w}])")
    return f"100 * (1 - sum by ({q.NODE}) ({idle}) / sum by ({q.NODE}) ({every}))"


FOLLOW["N007"] = Follow("cpu_util_pct", _cpu_expr, (q.NODE,), lambda v: v >= n007_cpu_saturated.BUSY_PCT,
                        n007_cpu_saturated.BUSY_PCT)


def _straggler_follow(finding: Finding) -> Follow | None:
    devs = finding.evidence.get("deviations")
    if not isinstance(devs, list) or not devs or not isinstance(devs[0], dict) or "gpu" not in finding.evidence:
        return None
    first = devs[0]
    signal = str(first.get("signal"))
    if signal not in {s.name for s in q.GPU_SIGNALS}:
        return None
    median, value = float(first.get("peer_median", 0.0)), float(first.get("value", 0.0))
    halfway = (median + value) / 2  # the straggler is bad once it is nearer its own mean than its peers'
    low = value < median
    return Follow(signal, _gpu_signal(signal), (q.NODE, "gpu"),
                  (lambda v: v <= halfway) if low else (lambda v: v >= halfway), halfway)


def _entity(finding: Finding, keys: tuple[str, ...]) -> tuple[str, ...] | None:
    node = finding.evidence.get("node")
    if not isinstance(node, str):
        return None
    if len(keys) == 1:
        return (node,)
    gpu = finding.evidence.get("gpu")
    if gpu is None:
        return None
    return (node, str(gpu))


def _first_bad(points: Sequence[tuple[float, float]], bad: Callable[[float], bool]) -> tuple[float | None, bool]:
    for i, (at, value) in enumerate(points):
        if bad(value):
            return at, i == 0
    return None, False


def follow(client: PrometheusClient, window: Window, scope: q.Scope, findings: Sequence[Finding],
           problems: list[tuple[str, str]]) -> tuple[list[Onset], list[SeriesLine], dict[int, Onset]]:
    """Onsets of the findings' signals, the timeline, and the onset of each finding (by its position).

    The timeline is the signal of the first (most important) finding that could be followed: its entities'
    series and the fleet's median of the same expression.
    """
    plans: dict[tuple[str, str], tuple[Follow, list[tuple[int, Finding, tuple[str, ...]]]]] = {}
    for index, finding in enumerate(findings):
        spec = _straggler_follow(finding) if finding.code == "N013" else FOLLOW.get(finding.code)
        if spec is None:
            continue
        entity = _entity(finding, spec.keys)
        if entity is None:
            continue
        key = (finding.code, spec.signal if finding.code != "N013" else f"{spec.signal}@{index}")
        plan = plans.setdefault(key, (spec, []))
        if len(plan[1]) < MAX_ENTITIES:
            plan[1].append((index, finding, entity))
    onsets: list[Onset] = []
    by_finding: dict[int, Onset] = {}
    lines: list[SeriesLine] = []
    timeline: tuple[str, str] | None = None
    for key, (spec, members) in sorted(plans.items(), key=lambda kv: kv[1][1][0][0]):
        code = key[0]
        nodes = sorted({m[2][0] for m in members})
        expr = spec.expr(scope, q.instance_regex(nodes))
        answer = client.query_range(expr, window.start, window.end, window.step_s)
        if answer.failure is not None:
            problems.append((f"fleet.onset.{code}", f"{answer.failure.kind}: {answer.failure.message}; "
                                                    f"when {spec.signal} went bad is unknown"))
            continue
        series = _by_entity(answer, spec.keys)
        for index, finding, entity in members:
            points = series.get(entity, ())
            first, at_start = _first_bad(points, spec.bad)
            name = entity[0] if len(entity) == 1 else f"{entity[0]} GPU {entity[1]}"
            onset = Onset(code, name, spec.signal, first, at_start, spec.threshold, finding.title)
            onsets.append(onset)
            by_finding[index] = onset
            if points and timeline in (None, key) and len(lines) < TIMELINE_SERIES:
                timeline = key
                lines.append(SeriesLine(f"{name} {spec.signal}", spec.signal, tuple(points)))
        if timeline == key:
            median = client.query_range(f"quantile(0.5, {spec.expr(scope, '')})", window.start, window.end,
                                        window.step_s)
            if median.failure is None and median.series and median.series[0].points:
                lines.append(SeriesLine(f"fleet median {spec.signal}", spec.signal, median.series[0].points))
    onsets.sort(key=lambda o: (o.first_bad if o.first_bad is not None else float("inf"), o.entity))
    return onsets, lines, by_finding


def _by_entity(answer: Answer, keys: tuple[str, ...]) -> dict[tuple[str, ...], tuple[tuple[float, float], ...]]:
    out: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
    for series in answer.series:
        out[tuple(series.labels.get(k, "") for k in keys)].extend(series.points)
    return {k: tuple(sorted(v)) for k, v in out.items()}
