"""N013 gpu-straggler: a GPU or node that runs slower than its peers in the same role.

What it detects:
    Within each peer group (GPUs of the same model, and of the same ``--role-label`` value when given), a GPU whose
    window mean deviates from the group's median in the bad direction: SM clock or power draw low, temperature
    high, utilisation low while its peers are busy. Among model servers of the same model, one whose median
    request latency is well above its peers'. Groups need at least ``MIN_PEERS`` members.

Why it matters:
    In data-parallel training every step waits for the slowest rank, and behind a load balancer the slowest
    replica sets the tail: one GPU clocked 30% below its peers (a failing fan, a power cap, a bad riser) slows the
    whole job by 30% while every per-node check passes. Only a comparison with its peers shows it.

How it is measured:
    Per signal, the median of the group and its spread as the median absolute deviation (MAD, scaled by 1.4826 to
    estimate a standard deviation), floored at ``SPREAD_FLOOR`` of the median so that a group of identical GPUs
    does not make noise a deviation. A member is a straggler when it lies at least ``DEVIATIONS`` spreads from
    the median in the bad direction and differs from it by at least ``MIN_RELATIVE`` (clocks, power, latency),
    ``MIN_TEMP_C`` degrees (temperature) or ``MIN_UTIL_POINTS`` points of utilisation while the group's median
    utilisation is at least ``BUSY_UTIL_PCT``. Clocks and power are compared only while the group is busy (idle
    GPUs drop their clocks by design). The evidence gives the value, the median, the spread and the peer count.
    Severity: ``high`` when a clock or latency deviates by ``HIGH_RELATIVE`` or more, else ``medium``.

Fix:
    Look at the straggler itself: its throttle reasons and temperature (cooling, fan, inlet air), its power limit
    (``nvidia-smi -q -d POWER``) against its peers', its PCIe link and Xid history; drain it from the job or the
    pool until it is fixed; a model-server straggler: compare its configuration, its GPU and its neighbours.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infradoctor.findings import Finding, Location, Rule, Severity
from infradoctor.fleet.evidence import FleetEvidence, FleetGpu, Stat
from infradoctor.node.rules._common import NodeOptions
from infradoctor.stats import quantile

RULE = Rule(
    "N013",
    "gpu-straggler",
    Severity.MEDIUM,
    "A GPU or node runs slower than its peers",
    fix="Check the straggler's throttle reasons, cooling, power limit and PCIe link against its peers'; drain it "
        "from the job or pool until fixed.",
    risk="Draining a node lowers capacity; a job restarted without it needs a new world size.",
    commands=("fleet",),
)

MIN_PEERS = 4
"""Members a peer group needs before anyone in it is compared."""
DEVIATIONS = 4.0
"""Spreads (scaled MAD) from the median at which a member counts as deviating."""
SPREAD_FLOOR = 0.02
"""Least spread, as a share of the median (a group of identical GPUs has a MAD of zero)."""
MIN_RELATIVE = 0.10
"""Least relative deviation of a clock, power draw or latency that counts."""
HIGH_RELATIVE = 0.25
"""Relative deviation of a clock or latency that makes the finding high."""
MIN_TEMP_C = 10.0
"""Least temperature above the median that counts, in degrees Celsius."""
MIN_UTIL_POINTS = 30.0
"""Least utilisation below the median that counts, in percentage points."""
BUSY_UTIL_PCT = 50.0
"""Group median utilisation from which clocks, power and utilisation are compared."""


@dataclass(frozen=True)
class _Check:
    signal: str
    low_is_bad: bool
    needs_busy: bool
    absolute: Callable[[NodeOptions], float] | None = None


_CHECKS = (
    _Check("sm_clock_mhz", low_is_bad=True, needs_busy=True),
    _Check("power_w", low_is_bad=True, needs_busy=True),
    _Check("temp_c", low_is_bad=False, needs_busy=False,
           absolute=lambda o: o.threshold(RULE.code, "MIN_TEMP_C", MIN_TEMP_C)),
    _Check("util_pct", low_is_bad=True, needs_busy=True,
           absolute=lambda o: o.threshold(RULE.code, "MIN_UTIL_POINTS", MIN_UTIL_POINTS)),
)


def _mean(stat: Stat | None) -> float | None:
    return stat.mean if stat is not None else None


@dataclass(frozen=True)
class Deviation:
    """One member's deviation from its group on one signal."""

    signal: str
    value: float
    median: float
    spread: float
    peers: int
    relative: float

    def as_evidence(self) -> dict[str, float | int | str]:
        return {"signal": self.signal, "value": round(self.value, 2), "peer_median": round(self.median, 2),
                "peer_spread": round(self.spread, 3), "peers": self.peers, "relative": round(self.relative, 3)}


def spread_of(values: Sequence[float], options: NodeOptions) -> tuple[float, float]:
    """A group's median and spread: the scaled MAD, floored at ``SPREAD_FLOOR`` of the median."""
    ordered = sorted(values)
    median = quantile(ordered, 0.5)
    mad = quantile(sorted(abs(v - median) for v in ordered), 0.5)
    floor = options.threshold(RULE.code, "SPREAD_FLOOR", SPREAD_FLOOR) * abs(median)
    return median, max(1.4826 * mad, floor, 1e-9)


def deviates(value: float, median: float, spread: float, *, low_is_bad: bool, options: NodeOptions,
             absolute: float | None = None) -> bool:
    """Whether ``value`` lies far from the group's median in the bad direction, by enough to matter."""
    delta = (median - value) if low_is_bad else (value - median)
    far = delta >= options.threshold(RULE.code, "DEVIATIONS", DEVIATIONS) * spread
    if absolute is not None:
        return far and delta >= absolute
    return far and median > 0 and delta / median >= options.threshold(RULE.code, "MIN_RELATIVE", MIN_RELATIVE)


def _groups(evidence: FleetEvidence) -> dict[str, list[FleetGpu]]:
    groups: dict[str, list[FleetGpu]] = defaultdict(list)
    for gpu in evidence.gpus:
        role = evidence.roles.get(gpu.node, "") if evidence.role_label else ""
        groups[f"{gpu.model or 'unknown model'}" + (f" / {evidence.role_label}={role}" if role else "")].append(gpu)
    return groups


@RULE.check(FleetEvidence, NodeOptions)
def check(evidence: FleetEvidence, options: NodeOptions) -> list[Finding]:
    """One finding per GPU that deviates from its peers; one per model server whose latency does."""
    min_peers = options.threshold(RULE.code, "MIN_PEERS", MIN_PEERS)
    busy = options.threshold(RULE.code, "BUSY_UTIL_PCT", BUSY_UTIL_PCT)
    high = options.threshold(RULE.code, "HIGH_RELATIVE", HIGH_RELATIVE)
    findings = []
    for group, members in sorted(_groups(evidence).items()):
        if len(members) < min_peers:
            continue
        utils = sorted(u for u in (_mean(g.signals.get("util_pct")) for g in members) if u is not None)
        group_busy = bool(utils) and quantile(utils, 0.5) >= busy
        found: dict[str, list[Deviation]] = defaultdict(list)
        by_label = {g.label: g for g in members}
        for spec in _CHECKS:
            if spec.needs_busy and not group_busy:
                continue
            values = {g.label: v for g in members if (v := _mean(g.signals.get(spec.signal))) is not None}
            if len(values) < min_peers:
                continue
            absolute = spec.absolute(options) if spec.absolute is not None else None
            median, spread = spread_of(list(values.values()), options)  # once per group: 8,000 GPUs stay linear
            for label, value in values.items():
                if deviates(value, median, spread, low_is_bad=spec.low_is_bad, options=options, absolute=absolute):
                    relative = abs(value - median) / abs(median) if median else 0.0
                    found[label].append(Deviation(spec.signal, value, median, spread, len(values), relative))
        for label, devs in sorted(found.items()):
            gpu = by_label[label]
            severe = any(d.relative >= high for d in devs if d.signal == "sm_clock_mhz")
            text = ", ".join(f"{d.signal} {d.value:.0f} vs peer median {d.median:.0f}" for d in devs)
            findings.append(RULE.finding(
                f"{label} straggles behind {devs[0].peers - 1} peers ({group}): {text}",
                {"node": gpu.node, "gpu": gpu.gpu, "uuid": gpu.uuid, "group": group,
                 "deviations": [d.as_evidence() for d in devs], "throttled_share": gpu.throttled_share},
                severity=Severity.HIGH if severe else None,
                location=Location(file=label),
            ))
    findings.extend(_server_stragglers(evidence, options, int(min_peers), high))
    return findings


def _server_stragglers(evidence: FleetEvidence, options: NodeOptions, min_peers: int, high: float) -> list[Finding]:
    groups: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
    for server in evidence.servers:
        if server.e2e_p50_s is not None:
            groups[(server.server, server.model)].append((server.node, server.e2e_p50_s))
    findings = []
    for (kind, model), members in sorted(groups.items()):
        if len(members) < min_peers:
            continue
        median, spread = spread_of([v for _, v in members], options)
        for node, value in members:
            if not deviates(value, median, spread, low_is_bad=False, options=options):
                continue
            relative = (value - median) / median if median else 0.0
            dev = Deviation("e2e_p50_s", value, median, spread, len(members), relative)
            findings.append(RULE.finding(
                f"{node}: {kind} {model} median latency {value * 1000:.0f} ms vs peer median {median * 1000:.0f} ms",
                {"node": node, "server": kind, "model": model, "deviations": [dev.as_evidence()]},
                severity=Severity.HIGH if relative >= high else None,
                location=Location(file=node),
            ))
    return findings
